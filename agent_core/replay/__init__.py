"""Replay and evals: past turns (or hand-written cases) run again against another model or
system prompt, with the journal's tool results served back, so nothing real happens.

- ``recorded``: what a journaled turn saw and did, as plain data (also an eval case's);
- ``runner``: the model loop of a replay, which can reach a model and nothing else;
- ``report``: what changed, per turn and in total (terminal, JSON, HTML);
- ``evals``: suites of cases with checks, scored against a stored baseline;
- ``spending``: the budgets, applied to replay and eval model calls.
"""
