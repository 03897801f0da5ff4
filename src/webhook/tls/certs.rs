//! Certificates: a CA and serving certificates made with rcgen, and
//! `infergate certs`.
//!
//! The CA lives a year by default and is what webhook configurations trust
//! (`caBundle`); `serve --self-signed` rotates it with an overlap
//! ([`super::rotation`]). Serving certificates are short-lived, reissued
//! under the current CA, and never outlive it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Default validity of the CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default validity of a serving certificate.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);
/// Clock skew allowance: certificates are valid from this long ago.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Errors while generating certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters or the key.
    #[error("failed to generate certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A DNS name is not valid in a certificate.
    #[error("invalid DNS name {0:?}")]
    DnsName(String),
    /// The serving certificate would have no subject alternative name.
    #[error("at least one DNS or IP subject alternative name is required")]
    NoSans,
    /// A validity is out of range.
    #[error("validity out of range")]
    Validity,
}

/// A certificate and its private key, PEM-encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// PEM certificate.
    pub cert: String,
    /// PEM private key (PKCS#8). Never logged.
    pub key: String,
}

impl std::fmt::Debug for PemPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemPair")
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

fn validity(
    params: &mut CertificateParams,
    now: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<(), CertError> {
    let back = time::Duration::try_from(BACKDATE).map_err(|_| CertError::Validity)?;
    params.not_before = now.checked_sub(back).ok_or(CertError::Validity)?;
    if not_after <= now {
        return Err(CertError::Validity);
    }
    params.not_after = not_after;
    Ok(())
}

fn after(
    now: time::OffsetDateTime,
    valid_for: Duration,
) -> Result<time::OffsetDateTime, CertError> {
    let fwd = time::Duration::try_from(valid_for).map_err(|_| CertError::Validity)?;
    now.checked_add(fwd).ok_or(CertError::Validity)
}

/// Generate a self-signed CA (ECDSA P-256) valid for `valid_for`.
pub fn generate_ca(common_name: &str, valid_for: Duration) -> Result<PemPair, CertError> {
    generate_ca_at(common_name, valid_for, time::OffsetDateTime::now_utc())
}

/// [`generate_ca`] as if the time were `now`.
pub fn generate_ca_at(
    common_name: &str,
    valid_for: Duration,
    now: time::OffsetDateTime,
) -> Result<PemPair, CertError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "infergate");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, now, after(now, valid_for)?)?;
    let cert = params.self_signed(&key)?;
    Ok(PemPair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issue a serving certificate for `dns_names` and `ips`, signed by `ca`.
pub fn issue_serving(
    ca: &PemPair,
    dns_names: &[String],
    ips: &[IpAddr],
    valid_for: Duration,
) -> Result<PemPair, CertError> {
    let now = time::OffsetDateTime::now_utc();
    issue_serving_at(ca, dns_names, ips, now, after(now, valid_for)?)
}

/// [`issue_serving`] as if the time were `now`, valid until `not_after`.
pub fn issue_serving_at(
    ca: &PemPair,
    dns_names: &[String],
    ips: &[IpAddr],
    now: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<PemPair, CertError> {
    if dns_names.is_empty() && ips.is_empty() {
        return Err(CertError::NoSans);
    }
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        dns_names
            .first()
            .cloned()
            .unwrap_or_else(|| ips.first().map(ToString::to_string).unwrap_or_default()),
    );
    params.distinguished_name = dn;
    let mut sans = Vec::with_capacity(dns_names.len() + ips.len());
    for name in dns_names {
        if !valid_dns_name(name) {
            return Err(CertError::DnsName(name.clone()));
        }
        let ia5 = name
            .clone()
            .try_into()
            .map_err(|_| CertError::DnsName(name.clone()))?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(ips.iter().copied().map(SanType::IpAddress));
    params.subject_alt_names = sans;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, now, not_after)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(PemPair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A DNS name acceptable in a serving certificate: dot-separated labels of
/// `[a-z0-9-]` (not starting or ending with `-`), an optional leading `*.`.
#[must_use]
pub fn valid_dns_name(name: &str) -> bool {
    let rest = name.strip_prefix("*.").unwrap_or(name);
    !rest.is_empty()
        && rest.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// The DNS names of the in-cluster Service `name` in `namespace`.
#[must_use]
pub fn service_dns_names(name: &str, namespace: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// Write `contents` to `path`; a private file is mode 0600 whether or not it
/// existed (its mode is set before anything is written into it).
fn write_file(path: &Path, contents: &str, private: bool) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mode = if private { 0o600 } else { 0o644 };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(contents.as_bytes())
    }
    #[cfg(not(unix))]
    {
        let _ = private;
        std::fs::write(path, contents)
    }
}

/// Write `ca.crt`, `tls.crt` and `tls.key` for the given SANs into `dir`,
/// and `ca.key` only when `write_ca_key` (without it the CA can sign nothing
/// more: nobody holds its key).
pub fn write_bundle(
    dir: &Path,
    dns_names: &[String],
    ips: &[IpAddr],
    serving_validity: Duration,
    write_ca_key: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let ca = generate_ca("infergate-ca", CA_VALIDITY.max(serving_validity))?;
    let serving = issue_serving(&ca, dns_names, ips, serving_validity)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
    let mut files = vec![
        ("ca.crt", &ca.cert, false),
        ("tls.crt", &serving.cert, false),
        ("tls.key", &serving.key, true),
    ];
    if write_ca_key {
        files.push(("ca.key", &ca.key, true));
    }
    for (name, contents, private) in files {
        let path = dir.join(name);
        write_file(&path, contents, private)
            .map_err(|e| format!("failed to write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Validity of a serving certificate from `infergate certs`, in days, unless asked otherwise.
pub const DEFAULT_DAYS: u32 = 90;

/// What `infergate certs` writes.
#[derive(Clone, Debug)]
pub struct Options {
    /// Directory to write `ca.crt`, `ca.key`, `tls.crt` and `tls.key` into.
    pub out_dir: PathBuf,
    /// DNS subject alternative names; with no name and no IP, the in-cluster Service's names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<std::net::IpAddr>,
    /// Validity of the serving certificate in days.
    pub days: u32,
    /// Also write `ca.key` (mode 0600).
    pub write_ca_key: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            out_dir: PathBuf::from("."),
            dns_names: Vec::new(),
            ips: Vec::new(),
            days: DEFAULT_DAYS,
            write_ca_key: false,
        }
    }
}

/// Run `infergate certs`.
pub fn run(args: Options) -> ExitCode {
    let mut dns = args.dns_names.clone();
    if dns.is_empty() && args.ips.is_empty() {
        dns = service_dns_names(
            crate::crdgen::SERVICE_NAME,
            crate::crdgen::SERVICE_NAMESPACE,
        );
    }
    if args.days == 0 {
        eprintln!("error: --days must be at least 1");
        return ExitCode::from(2);
    }
    let validity = Duration::from_secs(u64::from(args.days) * 24 * 3600);
    match write_bundle(&args.out_dir, &dns, &args.ips, validity, args.write_ca_key) {
        Ok(()) => {
            println!(
                "wrote ca.crt, {}tls.crt, tls.key to {} (SANs: {})",
                if args.write_ca_key { "ca.key, " } else { "" },
                args.out_dir.display(),
                dns.iter()
                    .cloned()
                    .chain(args.ips.iter().map(ToString::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_is_signed_by_the_ca_and_carries_the_sans() {
        let ca = generate_ca("test-ca", Duration::from_secs(3600)).unwrap();
        let leaf = issue_serving(
            &ca,
            &["infergate.infergate-system.svc".to_owned()],
            &["127.0.0.1".parse().unwrap()],
            Duration::from_secs(600),
        )
        .unwrap();
        let der = rustls_pki_types::CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let text = format!("{:?}", sans.value.general_names);
        assert!(text.contains("infergate.infergate-system.svc"), "{text}");
        assert!(
            text.contains("127.0.0.1") || text.contains("[127, 0, 0, 1]"),
            "{text}"
        );
        let ca_der = rustls_pki_types::CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        assert_eq!(cert.issuer(), ca_cert.subject());
        assert!(cert.verify_signature(Some(ca_cert.public_key())).is_ok());
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(lifetime, 600 + BACKDATE.as_secs() as i64);
        assert!(ca_cert.is_ca());
    }

    #[test]
    fn no_sans_is_an_error() {
        let ca = generate_ca("test-ca", Duration::from_secs(3600)).unwrap();
        assert!(matches!(
            issue_serving(&ca, &[], &[], Duration::from_secs(60)),
            Err(CertError::NoSans)
        ));
        assert!(matches!(
            issue_serving(&ca, &["bad name".into()], &[], Duration::from_secs(60)),
            Err(CertError::DnsName(_))
        ));
        assert!(valid_dns_name("*.infergate.svc"));
        assert!(!valid_dns_name("-a.b"));
        assert!(!valid_dns_name("a..b"));
    }

    #[test]
    fn key_is_redacted_in_debug() {
        let p = PemPair {
            cert: "C".into(),
            key: "SECRET".into(),
        };
        assert!(!format!("{p:?}").contains("SECRET"));
    }

    use rustls_pki_types::pem::PemObject;
}
