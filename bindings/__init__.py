"""specdec.bindings: the C API (include/specdec.h) as libspecdec.so, a cffi embedding of specdec.runtime.

    python -m specdec.bindings.build        (or specdec-build-capi)  ->  build/libspecdec.so and the examples

build.py builds it; _capi.py is the Python side the library runs (type and error conversion only; a model family's
own calls are in its _capi_<family>.py beside it); capi.c is its C side; examples/ holds the C and C++ examples. See
bindings/README.md.
"""
