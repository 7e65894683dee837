"""The packaged CPU launcher of verl's loop (``costaware.integrations.verl.cpu.run``): its own local Ray, the
user's overrides last, and a subprocess environment that works from any folder. Nothing here starts Ray."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import pytest

from costaware.integrations.verl.cpu import run


def test_doctests():
    assert doctest.testmod(run).failed == 0


@pytest.mark.parametrize(
    ("defaults", "user", "expected"),
    [
        # a `+` key the defaults add: the user's own `+` (or none) replaces it instead of clashing in Hydra
        (
            ["+algorithm.cost_aware.alpha=0.01"],
            ["+algorithm.cost_aware.alpha=0.1"],
            ["+algorithm.cost_aware.alpha=0.1"],
        ),
        (["+algorithm.cost_aware.alpha=0.01"], ["algorithm.cost_aware.alpha=0.1"], ["+algorithm.cost_aware.alpha=0.1"]),
        # a plugin key the defaults do not set still needs its `+` (the key is not in verl's schema)
        ([], ["algorithm.cost_aware.method=nonzero"], ["+algorithm.cost_aware.method=nonzero"]),
        (["a=1", "b=2"], ["a=3"], ["b=2", "a=3"]),  # a plain key: the user's value, the default gone
        (["+x.y=1", "z=2"], ["~x.y"], ["z=2"]),  # removing what only a default would add
        (["+x.y=1"], ["++x.y=5"], ["++x.y=5"]),
        (["z=2"], ["~z"], ["~z"]),  # a key of verl's own config: Hydra removes it
    ],
)
def test_user_overrides_come_last_and_win(defaults, user, expected):
    assert run.combine(defaults, user) == expected


def test_the_plugin_keys_of_a_method():
    assert run.plugin_overrides("stock", 0.01) == []
    assert run.plugin_overrides("p_star", 0.05) == [
        "+algorithm.cost_aware.method=p_star",
        "+algorithm.cost_aware.alpha=0.05",
    ]


@pytest.mark.parametrize("gpu", [False, True])
def test_every_run_starts_its_own_local_ray(tmp_path, gpu):
    assert "+ray_kwargs.ray_init.address=local" in run.overrides(tmp_path, gpu=gpu)


def test_environment_drops_ray_address_and_makes_pythonpath_absolute(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["rel/dir", "/abs/dir"]))
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    monkeypatch.chdir(tmp_path)
    env = run.environment()
    assert "RAY_ADDRESS" not in env
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert all(os.path.isabs(p) for p in paths) and str(tmp_path / "rel" / "dir") in paths and "/abs/dir" in paths
    import costaware

    source = Path(costaware.__file__).resolve().parents[1]  # this checkout's src/ (or an installed copy: absent)
    assert (paths[0] == str(source)) != (source.name in ("site-packages", "dist-packages"))
    assert env["VERL_USE_EXTERNAL_MODULES"] == "costaware.integrations.verl.cpu.patches"
    assert "VERL_USE_EXTERNAL_MODULES" not in run.environment(gpu=True)


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--batch", "-1"], ["--trainer", "v2"]])
def test_cli_refuses_bad_options_before_building_anything(tmp_path, bad, capsys):
    with pytest.raises(SystemExit) as info:
        run.main([str(tmp_path / "out"), *bad])
    assert info.value.code == 2 and bad[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_verl_driver_passes_address_local_to_ray_init(monkeypatch, tmp_path):
    """verl's own ``run_ppo`` with the harness's configuration, ``RAY_ADDRESS`` naming a running cluster: the
    ``ray.init`` call it makes starts a local instance."""
    pytest.importorskip("verl")
    main_ppo = pytest.importorskip("verl.trainer.main_ppo", reason="verl's trainer dependencies missing")
    import ray
    from hydra import compose, initialize_config_dir

    calls: list[dict] = []

    class Started(Exception):
        pass

    def init(*args, **kwargs):
        calls.append(kwargs)
        raise Started

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    config_dir = str(Path(main_ppo.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=run.overrides(tmp_path))
    with pytest.raises(Started):
        main_ppo.run_ppo(config, main_ppo.TaskRunnerV1)
    assert calls and calls[0]["address"] == "local"


FLAKY_START = """\
import pathlib, sys
marker = pathlib.Path("started-once")
if {fail_every} or not marker.exists():
    marker.touch()
    print("Exception: The current node timed out during startup. This could happen because ...")
    sys.exit(1)
print("trained")
"""


@pytest.mark.parametrize("fail_every", [False, True])
def test_a_ray_node_start_timeout_is_retried_once_and_said(tmp_path, capsys, fail_every):
    """Ray's node has a fixed 30 s to register; on a loaded machine that first start can fail before any step.
    The launcher starts once more (saying so), and a second such failure is the error."""
    (tmp_path / "fake_main_ppo.py").write_text(FLAKY_START.format(fail_every=fail_every))
    if fail_every:
        with pytest.raises(RuntimeError, match="timed out during startup") as exc:
            run.launch(tmp_path, [], name="run", module="fake_main_ppo", timeout=60)
        assert not isinstance(exc.value, run.RayNodeStartTimeout)  # a plain error to the caller
    else:
        metrics, out = run.launch(tmp_path, [], name="run", module="fake_main_ppo", timeout=60)
        assert metrics == [] and "trained" in out
    assert capsys.readouterr().err.count("starting once more") == 1


def test_another_failure_is_not_retried(tmp_path, capsys):
    (tmp_path / "fake_main_ppo.py").write_text("import sys; print('bad key'); sys.exit(2)")
    with pytest.raises(RuntimeError, match="exited 2"):
        run.launch(tmp_path, [], name="run", module="fake_main_ppo", timeout=60)
    assert "once more" not in capsys.readouterr().err
