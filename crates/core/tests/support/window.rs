//! The window-bound checker: slides every window over recorded admissions and checks a guarantee.
