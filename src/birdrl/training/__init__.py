"""The four-stage curriculum on TRL."""
