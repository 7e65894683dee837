"""Every sampling option is declared once (:mod:`costaware.sampling_options`) and each config still matches.

For every option of the spec: the core's ``SamplingConfig``, TRL's ``CostAwareGRPOConfig``
(``cost_aware_<name>``) and verl's ``CostAwareConfig`` (unless the option says why verl omits it) have the
field, with the spec's default and help; and every sampling field of each config is in the spec. A
mismatch is reported with the option's name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from costaware.grpo.config import AUTO_METHOD, SamplingConfig, resolve_method, resolve_proxy
from costaware.grpo.methods import ALPHA_AUTO_MAX, METHODS
from costaware.integrations.verl.config import CostAwareConfig
from costaware.sampling_options import SAMPLING_OPTIONS, Option, option, trl_help

# verl omits these keys, each for the reason its record gives (a new omission is a decision: list it here)
VERL_OMITS = {"budget", "pods_keep", "zero_tol", "max_draws_factor"}
# verl's own settings, not sampling options
VERL_OWN = {"enable", "seed", "balance_dp", "token_budget", "logprob_rows"}
# TRL's [sampling]/[proxy] fields that are not core options: the online β fit, which only TRL runs
TRL_OWN = {"cost_aware_calibration_interval", "cost_aware_calibration_rows"}


def _field_map(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def mismatches(
    cls: type,
    *,
    prefix: str = "",
    default: str = "default",
    help_of: Any = lambda o: o.help,
    omit: frozenset[str] = frozenset(),
    options: tuple[Option, ...] = SAMPLING_OPTIONS,
) -> list[str]:
    """How ``cls`` differs from the spec, one line per option, each starting with the option's name.

    ``prefix`` is the config's spelling (``cost_aware_``), ``default`` the :class:`Option` attribute its
    defaults follow (``core_default`` for the core), ``help_of`` its help for an option.
    """
    have = _field_map(cls)
    out = []
    for opt in options:
        if opt.name in omit:
            continue
        f = have.get(prefix + opt.name)
        if f is None:
            out.append(f"{opt.name}: {cls.__name__} has no field {prefix + opt.name}")
            continue
        want = getattr(opt, default)
        if f.default != want or type(f.default) is not type(want):
            out.append(f"{opt.name}: {cls.__name__}.{f.name} defaults to {f.default!r}, the spec to {want!r}")
        if f.metadata.get("help") != help_of(opt):
            out.append(f"{opt.name}: {cls.__name__}.{f.name}'s help is {f.metadata.get('help')!r}, not the spec's")
    return out


def core_mismatches(cls: type = SamplingConfig) -> list[str]:
    return mismatches(cls, default="core_default")


def trl_mismatches(cls: type) -> list[str]:
    return mismatches(cls, prefix="cost_aware_", help_of=trl_help)


def verl_mismatches(cls: type = CostAwareConfig) -> list[str]:
    return mismatches(cls, omit=frozenset(VERL_OMITS))


def _trl_config() -> type:
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    from costaware.integrations.trl.config import CostAwareGRPOConfig

    return CostAwareGRPOConfig


# ---------------------------------------------------------------------------------------- the spec


def test_the_spec_names_each_option_once_with_a_group_and_help():
    names = [o.name for o in SAMPLING_OPTIONS]
    assert len(names) == len(set(names))
    for o in SAMPLING_OPTIONS:
        assert o.group in ("sampling", "proxy") and o.help.strip() == o.help and o.help, o.name
    assert {o.name for o in SAMPLING_OPTIONS if o.verl_omits} == VERL_OMITS
    with pytest.raises(ValueError, match="no sampling option 'bogus'"):
        option("bogus")


def test_auto_is_the_engines_default_and_the_core_default_is_what_auto_gives_for_sequence_mean():
    assert option("method").default == option("proxy").default == "auto"
    core = SamplingConfig()
    assert core.method == resolve_method("auto", loss_type="grpo") == AUTO_METHOD["sequence_mean"]
    assert (core.proxy, core.beta) == resolve_proxy("auto", None, loss_type="grpo", method=core.method)
    assert set(AUTO_METHOD.values()) <= set(METHODS)
    assert f"[alpha, {ALPHA_AUTO_MAX}]" in option("adaptive_alpha_max_weight").help  # the help quotes the bound


def test_resolve_method_is_one_function_for_both_engines():
    from costaware.integrations.verl.config import CostAwareConfig

    assert resolve_method("auto", loss_type="seq-mean-token-mean") == "p_star"  # verl's loss_agg_mode
    assert resolve_method("auto", loss_type="token-mean") == "nonzero"
    assert CostAwareConfig().resolved("seq-mean-token-mean").method == "p_star"
    assert CostAwareConfig().resolved("token-mean").method == "nonzero"
    assert CostAwareConfig(method="p_smooth").resolved("token-mean", use_kl_loss=True).method == "p_smooth"
    with pytest.raises(ValueError, match=r"algorithm\.cost_aware\.method='auto' with .*use_kl_loss=True"):
        CostAwareConfig().resolved("seq-mean-token-mean", use_kl_loss=True)
    with pytest.raises(ValueError, match=r"'auto' with actor_rollout_ref\.actor\.entropy_coeff=0\.01"):
        CostAwareConfig().resolved("token-mean", entropy_coeff=0.01)
    with pytest.raises(ValueError, match=r"algorithm\.cost_aware\.method must be 'auto' or one of"):
        CostAwareConfig(method="bogus")


# ---------------------------------------------------------------------------------------- each config


def test_the_core_config_matches_the_spec():
    assert core_mismatches() == []
    assert set(_field_map(SamplingConfig)) == {o.name for o in SAMPLING_OPTIONS}  # every field is an option


def test_trls_config_matches_the_spec():
    cls = _trl_config()
    assert trl_mismatches(cls) == []
    grouped = {
        f.name
        for f in dataclasses.fields(cls)
        if f.name.startswith("cost_aware_") and str(f.metadata.get("help", "")).startswith(("[sampling]", "[proxy]"))
    }
    assert grouped - TRL_OWN == {f"cost_aware_{o.name}" for o in SAMPLING_OPTIONS}


def test_verls_config_matches_the_spec():
    assert verl_mismatches() == []
    assert set(_field_map(CostAwareConfig)) - VERL_OWN == {o.name for o in SAMPLING_OPTIONS} - VERL_OMITS


def test_the_engines_pass_every_option_on_to_the_core(tmp_path):
    """A value set on an engine reaches the core's config by name (no hand-written copy to forget)."""
    verl = CostAwareConfig(method="p_smooth", alpha=0.05, proxy_noise=0.1, weights="raw", merge_duplicates=False,
                           proxy="length_aware", proxy_beta=0.5, adaptive_alpha_max_weight=4.0)  # fmt: skip
    core = verl.sampling_config("token-mean")
    for o in SAMPLING_OPTIONS:
        if not o.verl_omits:
            assert getattr(core, o.name) == getattr(verl, o.name), o.name
    cls = _trl_config()
    values = {"method": "p_smooth", "alpha": 0.05, "proxy_noise": 0.1, "weights": "raw", "merge_duplicates": False,
              "budget": "tokens", "pods_keep": 2, "zero_tol": 1e-4, "max_draws_factor": 8.0,
              "proxy": "length_aware", "proxy_beta": 0.5, "adaptive_alpha_max_weight": 4.0}  # fmt: skip
    assert set(values) == {o.name for o in SAMPLING_OPTIONS}
    trl = cls(output_dir=str(tmp_path), use_cpu=True, **{f"cost_aware_{k}": v for k, v in values.items()})
    assert dataclasses.asdict(trl.sampling_config()) == values


# ---------------------------------------------------------------------------------------- the test catches drift


def test_a_drifted_default_or_help_is_reported_with_the_options_name():
    @dataclass(frozen=True)
    class DriftedCore(SamplingConfig):
        alpha: float = dataclasses.field(default=0.02, metadata={"help": option("alpha").help})

    assert core_mismatches(DriftedCore) == ["alpha: DriftedCore.alpha defaults to 0.02, the spec to 0.01"]

    @dataclass(frozen=True)
    class DriftedVerl(CostAwareConfig):
        method: str = dataclasses.field(default="p_star", metadata={"help": option("method").help})

    assert verl_mismatches(DriftedVerl) == ["method: DriftedVerl.method defaults to 'p_star', the spec to 'auto'"]

    @dataclass(frozen=True)
    class Reworded(CostAwareConfig):
        weights: str = dataclasses.field(default="centred", metadata={"help": "centred or raw"})

    assert verl_mismatches(Reworded) == ["weights: Reworded.weights's help is 'centred or raw', not the spec's"]


def test_an_option_a_config_lacks_is_reported_with_its_name():
    extra = Option("new_option", 1.0, "A new option.", "sampling")
    assert mismatches(SamplingConfig, default="core_default", options=(*SAMPLING_OPTIONS, extra)) == [
        "new_option: SamplingConfig has no field new_option"
    ]


def test_an_unresolved_auto_config_answers_what_the_verl_plugin_asks_of_its_rule():
    from costaware.grpo.methods import method_from_name

    picks = [method_from_name(m) for m in AUTO_METHOD.values()]
    for flag in ("needs_groups", "plain", "full_support"):
        assert len({getattr(rule, flag) for rule in picks}) == 1, flag
    assert CostAwareConfig().rule == method_from_name(AUTO_METHOD["sequence_mean"])
    # the options are checked where "auto" reads the most of them; the actor's loss decides later
    length_aware = CostAwareConfig(proxy="length_aware")
    assert length_aware.resolved("seq-mean-token-mean").method == "p_star"
    with pytest.raises(ValueError, match="proxy='length_aware' with method='nonzero'"):
        length_aware.resolved("token-mean")


def test_the_trl_guides_table_quotes_the_spec():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "trl.md").read_text()
    for o in SAMPLING_OPTIONS:
        row = f"| `cost_aware_{o.name}` | `{o.default!r}` | {o.help.replace('|', chr(92) + '|')} |"
        assert row in guide.splitlines(), f"{o.name}: docs/trl.md's row differs from the spec: {row}"
