//! `tether config check`: the resolved configuration, or every problem with its location.

use std::path::PathBuf;

use tether_config::Flags;

use crate::cmd::serve::read_config;

/// What `tether config` does.
#[derive(clap::Subcommand)]
pub(crate) enum Action {
    /// Resolve FILE (with the environment) and report.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

/// Prints the resolved file as TOML, or each problem; problems fail the command.
pub(crate) fn run(action: Action) -> Result<(), String> {
    let Action::Check { file } = action;
    let resolved = read_config(Some(&file), &Flags::default())?;
    if resolved.issues.is_empty() {
        print!("{}", resolved.to_toml());
        return Ok(());
    }
    for issue in &resolved.issues {
        let what = if issue.fatal { "error" } else { "degraded" };
        println!("{}: {what}: {}", issue.location, issue.message);
    }
    Err(format!("{} problem(s) in {}", resolved.issues.len(), file.display()))
}
