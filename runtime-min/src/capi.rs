//! C API placeholder
