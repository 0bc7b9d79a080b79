"""Built-in baselines: bc, idm_labeling, vm_idm, and the paper's maze architectures."""
