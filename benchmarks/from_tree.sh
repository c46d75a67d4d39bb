# Sourced by the scripts that run on a machine that cannot download (benchmarks/gpu_check.sh, models/speech_gpu.sh),
# in the tree's root: makes `import specdec` work from this tree without fetching anything. pip installs it in
# editable mode without dependencies; where pip cannot (no setuptools there, say), the package is laid out in
# /tmp/specdec-tree as the project's package-dir maps it (links into this tree) and put on PYTHONPATH.
specdec_from_tree() {
    if python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>/dev/null \
        && python3 -c "import specdec.runtime" 2>/dev/null; then
        return 0
    fi
    echo "pip could not install specdec from this tree: using the tree in place (/tmp/specdec-tree)"
    rm -rf /tmp/specdec-tree && mkdir -p /tmp/specdec-tree/specdec || return 1
    local f pair
    for f in specdec/*.py; do ln -s "$PWD/$f" /tmp/specdec-tree/specdec/ || return 1; done
    for pair in export:export runtime:runtime bindings:bindings models:models bench:benchmarks serve:serve; do
        ln -s "$PWD/${pair#*:}" "/tmp/specdec-tree/specdec/${pair%%:*}" || return 1
    done
    # PYTHONSAFEPATH (Python 3.11 and later): the tree's own specdec/ folder, in the working directory, would else
    # come first and hide the laid-out package's subpackages
    export PYTHONPATH=/tmp/specdec-tree${PYTHONPATH:+:$PYTHONPATH} PYTHONSAFEPATH=1
    python3 -c "import specdec.runtime"
}
