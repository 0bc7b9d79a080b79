"""The paper's studies over recorded runs: a sweep file's figure and replication report with
its claims checked, and the Procgen analysis of return and entropy gaps."""
