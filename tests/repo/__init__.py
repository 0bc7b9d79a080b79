"""Tests of the repository as a whole: docs checked against the code, import layers, sizes."""
