"""The main job's report, built from its typed run records (:mod:`costaware.experiments.records`, which sit
below the report: the experiments write them, the report reads them); and the figure of `costaware synthetic`.

- ``curves``: accuracy against an x-axis (total cost first, then PO tokens, generated tokens, generation
  rounds), seed means, the one first-crossing helper, savings and gaps with bootstrap CIs over seeds.
- ``evidence``: the decomposition of a saving by effect, verdicts, the plateau check, the validation-tuned
  baseline; ``evidence_text``: the same in words, every sentence generated from the numbers.
- ``rollout``: the prompt-stage sections (a finite train set): the decomposition with the prompt stage,
  the claims against the peers, the prompt-stage target's verdict.
- ``predicted``: predicted J ratios from the runs' per-prompt logs, shown beside the measured savings.
- ``verdicts``: the one verdict rule and the one way an estimate is written (no interval below 3 seeds).
- ``opening``: the report's opening table of claims and its sentences, from the claims' own comparisons.
- ``sweeps``: the verdicts across the price of a generated token and across targets, same bootstrap.
- ``charts``: cost to target per arm, the decomposition as a waterfall, the saving against the price.
- ``labels``: the one table of display names, derived from a typed ``costaware.experiments.arms.Arm``; nothing
  keys on a label; and the one fixed colour and marker per method.
- ``md``: the one Markdown escape; every table (``md.table``) and every label in a sentence goes through it.
- ``figures``: the report's figures, one panel per task and setting, two a row.
- ``grpo``: the `costaware reproduce` report, ``write_report``, a pipeline of stages:
  ``claims`` and ``run_tables`` compute every number into frozen records (``arm_stats``: one arm's
  method-table row); ``draw`` draws the figures; ``markdown_report`` joins the Markdown of ``markdown_front``,
  ``markdown_sweeps``, ``markdown_sections`` and ``markdown_appendix``; ``html_page`` renders it through a
  Jinja2 template (``templates/report.html.j2``); ``summary_json`` writes the numbers as JSON.
- ``synthetic``: the figure and table of `costaware synthetic`.
"""
