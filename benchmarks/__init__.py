"""specdec.bench: latency, acceptance rate, cost ratio and speedup measurements (`specdec-bench`, cli.py).

A command that is several modules is a subpackage with its command line (cli.py), its measuring (measure.py and
the like) and its tables and Markdown report (tables.py): sweep, drafts, beams, shapes (T5 and Whisper), dtypes.
A command of one module is a module here: serve_load, width, datastore_scale, batch, gpu (with gpu_check.sh).
What several commands share is in common/: the flags (options), running a command (running), the per-repeat sums,
filters and interleaving (runs), the report (report, tables), prompts, machine, the cost probe (costs), Theorem
3.8 (theory) and the peers."""
