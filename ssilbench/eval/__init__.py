"""Evaluation: vectorised rollouts, the seeding protocol and score normalisation."""
