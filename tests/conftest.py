import os

# Two shared cores: keep each test process to one intra-op thread so that numbers are stable.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

from hypothesis import settings  # noqa: E402

# The test command must give the same verdict on every run (CI is one shot); the property tests are still
# searched at random with `pytest --hypothesis-profile=explore` (more examples, fresh seed each run).
settings.register_profile("default", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=500, print_blob=True)
settings.load_profile("default")


# Under pytest-xdist (the README's `-n auto --dist loadgroup`) a test file is one unit of work, so its
# module-scoped fixtures are built once. Files that start several processes (torchrun's workers, a Ray
# cluster, verl's trainer loop) each fill both cores on their own: they share one unit, so they run one after
# another on one worker while the other takes the in-process files, and they go first, as the longest unit.
# A torchrun launch picks a free port (`--standalone`) and each Ray test starts its own local cluster: this is
# about cores, not clashes.
MULTI_PROCESS_FILES = frozenset(
    {
        "test_examples.py",
        "test_process_group.py",
        "test_trl_multiprocess.py",
        "test_trl_no_surprises.py",
        "test_verl_cpu_run.py",
        "test_verl_driver.py",
        "test_verl_e2e.py",
        "test_verl_prompt_hook.py",
    }
)


# first: the `slow` marks must be on the items before `-m "not slow"` deselects
@__import__("pytest").hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    import pytest
    from tiers import is_slow

    for item in items:
        group = "multi_process" if item.path.name in MULTI_PROCESS_FILES else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
        if is_slow(item.path.name, item.name):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.path.name not in MULTI_PROCESS_FILES)  # stable: file order kept otherwise
    if not any("::" in arg for arg in config.args):  # whole files: every id of a collected test is here
        _refuse_stale_parameter_ids(items)


def _refuse_stale_parameter_ids(items):
    """A listed ``name[id]`` whose test was collected but has no such id was renamed: it would slip back
    into the README's command. (``tests/test_tiers.py`` checks the bare names without collecting.)"""
    import pytest
    from tiers import SLOW_TESTS

    collected = {(item.path.name, item.name) for item in items}
    bare = {(file, name.split("[", 1)[0]) for file, name in collected}
    for file, names in SLOW_TESTS.items():
        for name in names:
            if "[" in name and (file, name.split("[", 1)[0]) in bare and (file, name) not in collected:
                raise pytest.UsageError(f"tests/tiers.py lists {file}::{name}, which no collected test has")
