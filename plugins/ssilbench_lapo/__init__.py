"""LAPO and LAPO+: latent action policies learned from action-free transitions (the paper's
section 5.1); see docs/methods/lapo.md."""
