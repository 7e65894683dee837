"""Reports built from typed run records (:mod:`costaware.records`, below both the experiments and the report).

- ``curves``: accuracy against an x-axis (total cost first, then PO tokens, generated tokens, generation
  rounds), seed means, the one first-crossing helper, savings and gaps with bootstrap CIs over seeds.
- ``evidence``: the decomposition of a saving by effect, verdicts, the plateau check, the validation-tuned
  baseline; every sentence generated from numbers.
- ``rollout``: the prompt-stage sections (a finite train set): the decomposition with the prompt stage,
  the claims against the peers, the issue's target verdict.
- ``predicted``: predicted J ratios from the runs' per-prompt logs, shown beside the measured savings.
- ``labels``: the one table of display names, derived from a typed ``costaware.arms.Arm``; nothing keys on a label.
- ``md``: the one Markdown escape; every table (``md.table``) and every label in a sentence goes through it.
- ``figures``: the report's figures, one panel per task and setting, two a row.
- ``grpo``: the `costaware reproduce` report (Markdown, HTML, JSON, figures).
- ``synthetic``: the figure and table of `costaware synthetic`.
"""
