"""UVA: one transformer over image latents and action chunks, trained in five task modes."""
