"""MongoDB driver: one messages collection indexed by queue scope and claimable time."""
