"""Reports built from typed run records (:mod:`costaware.records`, below both the experiments and the report).

- ``curves``: accuracy against an x-axis (PO tokens, generation rounds, total cost), seed means, the one
  first-crossing helper, savings and gaps with bootstrap CIs over seeds.
- ``evidence``: the decomposition of a saving by effect, verdicts, the plateau check, the validation-tuned
  baseline; every sentence generated from numbers.
- ``labels``: the one table of display names, derived from a typed ``costaware.arms.Arm``; nothing keys on a label.
- ``md``: the one Markdown escape; every table (``md.table``) and every label in a sentence goes through it.
- ``figures``: the report's figures, one panel per task and setting, two a row.
- ``grpo``: the `costaware reproduce` report (Markdown, HTML, JSON, figures).
- ``synthetic``: the figure and table of `costaware synthetic`.
"""
