"""`specdec-bench sweep`: every (temperature, filter, gamma) on one export, against Theorem 3.8."""
