"""The research domain: an agent writes programs, a sandbox runs them on data tasks (`domain.py`)."""
