"""The estimators and the switch every adaptive choice learns with."""
