"""`specdec-bench dtypes`: the int8 weight variants of a real-size pair against CTranslate2."""
