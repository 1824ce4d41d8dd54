//! Where the edge's signing secret comes from: `TETHER_JWT_SECRET`, else
//! configuration, else a random secret generated once into a 0600 file in
//! the data directory (written so that two first starts agree on one).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Keys;

/// Environment variable that overrides every other secret source.
pub const SECRET_ENV: &str = "TETHER_JWT_SECRET";
/// File name of the generated secret inside the data directory.
pub const SECRET_FILE: &str = "jwt-secret";

/// Where the secret came from, for the startup log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `TETHER_JWT_SECRET`.
    Env,
    /// The configuration.
    Config,
    /// An existing file in the data directory.
    File(PathBuf),
    /// A file this process just created.
    Created(PathBuf),
}

/// Why the secret could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read or written.
    #[error("jwt secret file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The secret is too short to be safe.
    #[error("jwt secret must be at least 32 bytes (got {0})")]
    TooShort(usize),
    /// The OS random source failed.
    #[error("could not generate a jwt secret: {0}")]
    Random(String),
}

impl Keys {
    /// Loads the secret by precedence: env, config, data-dir file, newly created file.
    pub fn load(configured: Option<&str>, data_dir: &Path) -> Result<(Keys, SecretSource), SecretError> {
        if let Ok(secret) = std::env::var(SECRET_ENV) {
            if !secret.is_empty() {
                return Ok((Keys::from_secret(secret.as_bytes())?, SecretSource::Env));
            }
        }
        if let Some(secret) = configured {
            return Ok((Keys::from_secret(secret.as_bytes())?, SecretSource::Config));
        }
        let path = data_dir.join(SECRET_FILE);
        let io = |source| SecretError::Io { path: path.clone(), source };
        match std::fs::read_to_string(&path) {
            Ok(secret) => {
                return Ok((Keys::from_secret(secret.trim().as_bytes())?, SecretSource::File(path)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| SecretError::Random(e.to_string()))?;
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::create_dir_all(data_dir).map_err(io)?;
        // Write a private temp file, then hard-link it into place: the link is
        // atomic and never overwrites, so a concurrent reader sees no half-written
        // secret and two first starts agree on one secret.
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = data_dir.join(format!(".{SECRET_FILE}.{}.{nonce}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let tmp_io = |source| SecretError::Io { path: tmp.clone(), source };
        let mut file = options.open(&tmp).map_err(tmp_io)?;
        file.write_all(hex.as_bytes()).and_then(|()| file.sync_all()).map_err(tmp_io)?;
        drop(file);
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok((Keys::from_secret(hex.as_bytes())?, SecretSource::Created(path))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let secret = std::fs::read_to_string(&path).map_err(io)?;
                Ok((Keys::from_secret(secret.trim().as_bytes())?, SecretSource::File(path)))
            }
            Err(e) => Err(io(e)),
        }
    }
}
