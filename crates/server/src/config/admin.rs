//! The `admin:` section: the admin API ([`crate::http::admin`]), off by default.
//!
//! ```yaml
//! admin:
//!   enabled: true          # needs server.bearer_token or bearer_token_file
//! ```
//!
//! Read at start only, as `server:` and `backend:` are. A file enabling
//! the admin API without a bearer token is refused: the API can turn any
//! limit off, so it never runs open.

use serde::Deserialize;

use crate::yaml::checked_mapping;

/// The admin API's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Serve `/v1/admin/` (behind the bearer token). By default, off.
    pub enabled: bool,
}

/// The `admin:` section, checked within its mapping.
#[derive(Default)]
pub(crate) struct AdminSection(pub(crate) AdminSettings);

impl<'de> Deserialize<'de> for AdminSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, AdminSettings, AdminSection>(d)
    }
}

impl TryFrom<AdminSettings> for AdminSection {
    type Error = String;

    fn try_from(settings: AdminSettings) -> Result<AdminSection, String> {
        Ok(AdminSection(settings))
    }
}

/// The refusal of a file enabling the admin API without a token.
pub(crate) const NEEDS_TOKEN: &str = "admin.enabled: the admin API needs a bearer token (server.bearer_token or server.bearer_token_file): refused to run it open";
