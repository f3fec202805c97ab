"""The commands that investigate and share captures: search, findings, the cache advisor, replay,
copy as cURL, export and import."""
