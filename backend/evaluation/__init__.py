"""Is the credit right? The synthetic oracle, the Monte Carlo teacher's bench and their metrics."""
