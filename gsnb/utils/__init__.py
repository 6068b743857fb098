"""Small helpers shared across gsnb's modules."""
