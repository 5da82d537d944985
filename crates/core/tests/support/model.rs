//! Reference models: each algorithm restated from its definition, with a mutex and i128 arithmetic.
