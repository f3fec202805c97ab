"""Empty-answer recovery: an empty answer after successful tools is asked for once more."""
