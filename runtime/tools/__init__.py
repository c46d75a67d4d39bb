"""The runtime's command lines: specdec-generate and specdec-datastore."""
