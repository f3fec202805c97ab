"""Handing captures on: bodies with keys masked, copy as cURL, HAR and bundle export, import."""
