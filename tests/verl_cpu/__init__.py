"""CPU support for running verl 0.9.x's own trainer loop in tests (see ``docs/verl-cpu.md``).

Importing the package changes nothing; ``verl_cpu.patches`` (loaded by verl through
``VERL_USE_EXTERNAL_MODULES=verl_cpu.patches``) installs the platform, the HF rollout server and the
runtime patches. ``run`` launches ``main_ppo``, ``fixture`` builds the model and data, ``cluster`` runs on a
2-node ``ray.cluster_utils.Cluster``.
"""
