"""Each op family's terms: the norms of what a fair kernel rounds and the sensitivities to it (attention,
norms, softmax, sampling, spectral, covariance, composites, dequantized weights), and how often a sum's terms repeat. Each
module stands alone; bounds/accumulation.py joins them into rules."""
