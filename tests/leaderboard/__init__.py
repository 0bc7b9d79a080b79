"""Tests of ssilbench.leaderboard: tables, statistics and every export format."""
