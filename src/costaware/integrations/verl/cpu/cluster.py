"""``main_ppo`` on a 2-node ``ray.cluster_utils.Cluster`` (two raylets on this machine), then shut down.

verl's ``run_ppo`` skips ``ray.init`` when Ray is already initialised, so the cluster is started and
joined first; the runtime env verl would have passed to ``ray.init`` goes into the nodes' environment.

    python -m costaware.integrations.verl.cpu.cluster <main_ppo overrides>
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ["TRANSFER_QUEUE_ENABLE"] = "1"  # main_ppo.run_ppo sets it in ray.init's runtime env
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 1})
    try:
        cluster.add_node(num_cpus=8, num_gpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        from verl.trainer.main_ppo import main as main_ppo

        sys.argv = ["main_ppo", *sys.argv[1:]]
        main_ppo()
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
