"""Tests of ssilbench.studies: the paper's reports, figures and analysis."""
