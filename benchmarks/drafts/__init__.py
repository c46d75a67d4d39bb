"""`specdec-bench drafts`: where the guesses come from, per task, temperature and draft configuration."""
