//! Mapping errors to exit codes.

/// Marks an error as the user's input, so `main` exits with code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `msg` as a [`BadInput`] error.
pub fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

/// 2 when any error in the chain is bad input, 1 otherwise.
pub fn code_for(e: &anyhow::Error) -> u8 {
    let bad = e.chain().any(|c| {
        c.is::<BadInput>()
            || c.downcast_ref::<hetero_plan::Error>()
                .is_some_and(hetero_plan::Error::is_bad_input)
            || c.downcast_ref::<hetero_profiler::Error>()
                .is_some_and(hetero_profiler::Error::is_bad_input)
            || c.downcast_ref::<hetero_runtime::Error>()
                .is_some_and(hetero_runtime::Error::is_bad_input)
            || c.downcast_ref::<hetero_solver::Error>()
                .is_some_and(hetero_solver::Error::is_bad_input)
    });
    if bad { 2 } else { 1 }
}
