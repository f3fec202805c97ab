"""The small core: the turn loop, the extension SPI and its events, messages, the model seam, history,
and the leaves the features share (settings, budget lines, the estimate)."""
