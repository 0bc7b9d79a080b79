"""Push-T (gym-pusht) for ssilbench: a 2-D block-pushing task with pixel observations,
continuous (x, y) target actions and demonstrations in the diffusion-policy replay layout."""
