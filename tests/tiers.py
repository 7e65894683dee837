"""The tests the README's command leaves to CI's second pass, ``pytest -q -n auto -m slow``.

The README's command (``pytest -q -n auto -m "not slow"``) runs every other test: each module's unit and
property tests at tiny sizes. These are the end-to-end runs that start other processes (torchrun's workers,
Ray with verl's loop, the examples, the main job) and the Monte-Carlo checks that take more than about 5 s
on a 2-core machine (measured with ``pytest -n auto --durations=0``). ``tests/test_tiers.py`` fails when a
name here matches no test of its file, so a renamed test cannot slip back into the README's command.
"""

from __future__ import annotations

# every test of these files starts several processes: torchrun, a Ray cluster, or a whole example script
SLOW_FILES = frozenset(
    {
        "test_examples.py",
        "test_trl_multiprocess.py",
        "test_trl_multiprocess_skip.py",
        "test_verl_e2e.py",
    }
)

# file -> test names (a parametrised test by its full id, or all its ids by its bare name)
SLOW_TESTS: dict[str, frozenset[str]] = {
    "test_reproduce.py": frozenset(
        {
            "test_ctrl_c_stops_every_worker_then_resume_finishes_the_quick_profile",  # the quick profile, twice
            "test_workers_exit_when_the_parent_is_killed",
        }
    ),
    "test_fingerprint.py": frozenset({"test_the_job_still_computes_the_recorded_fingerprint[2]"}),
    "test_coverage.py": frozenset({"test_the_recorded_coverage_is_what_the_archive_gives"}),  # 400 draws a size
    "test_gpu_check.py": frozenset({"test_cpu_tiny_dry_run_passes_its_checks"}),
    "test_trl_no_surprises.py": frozenset({"test_torchrun_two_processes_without_use_cpu_is_refused_with_the_fix"}),
    "test_verl_driver.py": frozenset({"test_python_m_main_ppo_fails_before_ray_starts"}),
    "test_verl_prompt_hook.py": frozenset(
        {"test_a_trainer_module_imported_before_the_hook_is_rebound_to_the_patched_function"}
    ),
    "test_integration_verl.py": frozenset(
        {
            "test_entry_point_loads_plugin_in_fresh_process",
            "test_external_modules_env_loads_plugin",
            "test_every_listed_method_is_accepted_and_the_unknown_method_error_lists_them",
        }
    ),
    "test_docs_code.py": frozenset({"test_code_block_runs[README.md#0]", "test_code_block_runs[docs/trl.md#0]"}),
    # Monte-Carlo and exact-expectation checks of verl's update through its own loss (each 6-25 s)
    "test_verl_unbiased.py": frozenset(
        {
            "test_token_mean_expected_update_is_the_full_batch_update",
            "test_per_draw_normaliser_is_caught",
            "test_merged_p_star_with_the_wrong_support_is_caught",
            "test_merged_p_smooth_with_kl_and_entropy_is_unbiased",
            "test_merged_p_smooth_self_normalised_is_caught",
            "test_merged_p_star_through_update_actor_is_unbiased",
            "test_row_normalised_modes_are_unbiased",
            "test_all_zero_advantages_still_get_the_kl_and_entropy_update",
        }
    ),
    "test_integration_trl.py": frozenset(
        {
            "test_raw_weighted_plans_are_unbiased_for_the_baseline_gradient",
            "test_same_seed_same_run",
            "test_trainer_runs_and_counts_the_tokens_it_feeds[pods-extra3]",
            "test_trainer_runs_and_counts_the_tokens_it_feeds[nonzero-extra2]",
            "test_trainer_runs_and_counts_the_tokens_it_feeds[p_smooth-extra4]",
        }
    ),
    "test_cli.py": frozenset({"test_eval_missing_or_corrupt_inputs"}),
    "test_report_rollout.py": frozenset(
        {
            "test_missing_logs_are_said_in_one_line_not_an_error",
            "test_write_report_renders_the_prompt_stage_section_with_predictions",
        }
    ),
    "test_row_variance.py": frozenset({"test_iid_step_variances_match_monte_carlo_over_real_plans"}),
    "test_process_group.py": frozenset({"test_a_timed_out_run_kills_the_group_and_a_finished_one_returns_its_output"}),
    "test_sgd.py": frozenset(
        {
            "test_measured_cost_ratio_matches_theory",
            "test_reference_converges_on_least_squares",
            "test_runner_agrees_statistically_with_numpy_draws",
        }
    ),
    "test_trl_defaults_budget.py": frozenset(
        {
            "test_the_readme_example_runs_as_is_on_cpu",
            "test_token_budget_stops_when_the_round_that_reaches_it_is_spent[bnpo-none]",
        }
    ),
    "test_report_opening.py": frozenset(
        {
            "test_a_method_has_one_colour_whatever_else_the_report_holds",
            "test_the_first_screen_holds_the_opening_table",  # renders the whole HTML report (about 15 s)
        }
    ),
    "test_report.py": frozenset({"test_numbers_do_not_depend_on_display_labels"}),  # two reports (about 6 s)
    "test_quiet.py": frozenset({"test_workers_draw_no_bar_and_create_no_cross_process_lock"}),  # spawns workers
    "test_verl_logprobs.py": frozenset({"test_settings_that_read_every_rows_logprobs_keep_the_stock_passes"}),
    # chi-square and Monte-Carlo checks: the README's command keeps one case of each, CI runs the others
    "test_kv_sampler.py": frozenset(
        {
            "test_two_step_sequence_law_passes_chi_square_and_a_wrong_temperature_fails_it[t1]",
            "test_two_step_sequence_law_passes_chi_square_and_a_wrong_temperature_fails_it[t0.7-k6]",
            "test_next_token_law_passes_chi_square_and_a_10pct_wrong_temperature_fails_it[t0.7-k6]",
            "test_next_token_law_passes_chi_square_and_a_10pct_wrong_temperature_fails_it[t1.2-p0.85]",
        }
    ),
    "test_step_error.py": frozenset(
        {
            "test_closed_form_matches_monte_carlo_over_real_plans[p_smooth]",
            "test_closed_form_matches_monte_carlo_over_real_plans[pods]",
            "test_closed_form_matches_monte_carlo_over_real_plans[grpo]",
        }
    ),
    "test_subset.py": frozenset({"test_greedy_within_two_of_exact_and_both_feasible"}),
    "test_grpo_support_budget.py": frozenset({"test_support_budget_is_unbiased_for_nonzeros_expected_step"}),
    "test_sampler.py": frozenset({"test_weighted_mean_is_unbiased_with_online_updates[2]"}),
    "test_report_tuned.py": frozenset({"test_no_sweep_beside_grpos_adds_nothing_to_the_report"}),
}


def is_slow(file_name: str, test_name: str) -> bool:
    """``test_name``: the item's name, with its parameter id if it has one."""
    names = SLOW_TESTS.get(file_name, frozenset())
    return file_name in SLOW_FILES or test_name in names or test_name.split("[", 1)[0] in names
