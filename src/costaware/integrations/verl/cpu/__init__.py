"""CPU support for running verl 0.9.x's own trainer loop, ``python -m verl.trainer.main_ppo``, with the
plugin on a machine without a GPU (see ``docs/verl-cpu.md``).

Importing the package changes nothing. ``patches`` (loaded by verl through
``VERL_USE_EXTERNAL_MODULES=costaware.integrations.verl.cpu.patches``) installs the platform, the HF
rollout server and the runtime patches. ``run`` launches ``main_ppo`` (``python -m
costaware.integrations.verl.cpu.run OUT``: the tiny ``sort`` policy, its data and one run), ``fixture``
builds the model and data, ``cluster`` runs on a 2-node ``ray.cluster_utils.Cluster``. Needs the ``verl``
extra (``pip install costaware[verl]``), in an environment without TRL.
"""
