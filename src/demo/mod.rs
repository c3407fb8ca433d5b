//! The parts of `hetero demo` beside its steps (`demo_cmd`): which
//! processors it profiles, the plans it compares the plan with, the
//! reference profile built in, and the screen it ends with.

pub mod choice;
pub mod compare;
pub mod reference;
pub mod screen;
