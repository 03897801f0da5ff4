//! What the self-signed Secret should hold next: a pure function of what
//! it holds, the settings and the time ([`step`]).
//!
//! - **The CA rotates with an overlap.** When a third of the CA's lifetime
//!   is left, a next CA is generated and enters the trust bundle (previous,
//!   current and next CA certificates) that the lease holder writes into every
//!   `caBundle`; it records which bundle it wrote in the Secret's
//!   [`INJECTED_ANNOTATION`]. Only once that bundle is recorded and
//!   [`Settings::ca_overlap`] has passed does the next CA become current and
//!   sign serving certificates. The old CA stays in the bundle, as previous,
//!   until it expires.
//! - **A serving certificate never outlives its CA**, is signed by the
//!   current CA, carries every SAN any replica asked for (the union: replicas
//!   with different `--cert-dns` do not take turns), and is reissued when a
//!   third of its lifetime is left.
//! - **A partial or corrupt Secret is repaired**: a usable CA is kept, a
//!   usable next CA is promoted, otherwise a new CA is generated; whatever
//!   else is missing or broken is reissued.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::certs::{self, BACKDATE, CertError, PemPair};

/// The Secret's annotation naming the trust bundle the lease holder wrote
/// into every `caBundle` ([`bundle_id`]).
pub use crate::api::vocabulary::names::ANNOTATION_CA_BUNDLE_INJECTED as INJECTED_ANNOTATION;

/// Data keys of the Secret.
pub mod keys {
    /// The current CA certificate.
    pub const CA_CERT: &str = "ca.crt";
    /// The current CA key.
    pub const CA_KEY: &str = "ca.key";
    /// The serving certificate.
    pub const TLS_CERT: &str = "tls.crt";
    /// The serving key.
    pub const TLS_KEY: &str = "tls.key";
    /// The next CA certificate, during a rotation.
    pub const NEXT_CA_CERT: &str = "next-ca.crt";
    /// The next CA key, during a rotation.
    pub const NEXT_CA_KEY: &str = "next-ca.key";
    /// The previous CA certificate, until it expires.
    pub const PREVIOUS_CA_CERT: &str = "previous-ca.crt";
}

/// What the rotation needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// DNS SANs this replica serves.
    pub dns_names: Vec<String>,
    /// IP SANs this replica serves.
    pub ips: Vec<IpAddr>,
    /// Lifetime of a serving certificate (capped by its CA's).
    pub serving_validity: Duration,
    /// Lifetime of a CA.
    pub ca_validity: Duration,
    /// How long a next CA is in every `caBundle` before it signs anything.
    pub ca_overlap: Duration,
}

/// The Secret's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The CA that signs serving certificates.
    pub ca: PemPair,
    /// The serving pair.
    pub serving: PemPair,
    /// The CA that will sign next, during a rotation.
    pub next_ca: Option<PemPair>,
    /// The CA that signed before, until it expires.
    pub previous_ca: Option<String>,
}

impl Stored {
    /// The Secret's data.
    #[must_use]
    pub fn data(&self) -> BTreeMap<&'static str, &str> {
        let mut d = BTreeMap::from([
            (keys::CA_CERT, self.ca.cert.as_str()),
            (keys::CA_KEY, self.ca.key.as_str()),
            (keys::TLS_CERT, self.serving.cert.as_str()),
            (keys::TLS_KEY, self.serving.key.as_str()),
        ]);
        if let Some(n) = &self.next_ca {
            d.insert(keys::NEXT_CA_CERT, n.cert.as_str());
            d.insert(keys::NEXT_CA_KEY, n.key.as_str());
        }
        if let Some(p) = &self.previous_ca {
            d.insert(keys::PREVIOUS_CA_CERT, p.as_str());
        }
        d
    }

    /// The trust bundle for `caBundle`: previous, current and next CA.
    #[must_use]
    pub fn bundle(&self) -> String {
        let mut out = String::new();
        for pem in self.bundle_certs() {
            out.push_str(pem.trim_end());
            out.push('\n');
        }
        out
    }

    fn bundle_certs(&self) -> impl Iterator<Item = &str> {
        self.previous_ca
            .as_deref()
            .into_iter()
            .chain(std::iter::once(self.ca.cert.as_str()))
            .chain(self.next_ca.as_ref().map(|n| n.cert.as_str()))
    }
}

/// Identifies a trust bundle: the subject key identifiers of its CAs.
#[must_use]
pub fn bundle_id(stored: &Stored) -> String {
    stored
        .bundle_certs()
        .map(|pem| {
            inspect(pem)
                .ok()
                .and_then(|i| i.ski)
                .map(|k| k.iter().map(|b| format!("{b:02x}")).collect::<String>())
                .unwrap_or_else(|| "?".to_owned())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What [`step`] decided.
#[derive(Clone, Debug)]
pub struct Step {
    /// The contents the Secret should hold.
    pub stored: Stored,
    /// What changed and why (empty: keep the Secret as it is).
    pub changes: Vec<String>,
}

/// What a certificate says, as far as rotation cares.
#[derive(Clone, Debug)]
struct Info {
    not_before: i64,
    not_after: i64,
    ski: Option<Vec<u8>>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    spki: Vec<u8>,
    is_ca: bool,
    der: Vec<u8>,
}

fn inspect(pem: &str) -> Result<Info, String> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let mut info = Info {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        ski: None,
        dns: Vec::new(),
        ips: Vec::new(),
        spki: cert.public_key().subject_public_key.data.to_vec(),
        is_ca: cert.is_ca(),
        der: der.to_vec(),
    };
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => info.ski = Some(k.0.to_vec()),
            ParsedExtension::SubjectAlternativeName(san) => {
                for n in &san.general_names {
                    match n {
                        GeneralName::DNSName(d) => info.dns.push((*d).to_owned()),
                        GeneralName::IPAddress(b) => match b.len() {
                            4 => info
                                .ips
                                .push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default())),
                            16 => info
                                .ips
                                .push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default())),
                            _ => {}
                        },
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(info)
}

fn parsed(der: &[u8]) -> Option<X509Certificate<'_>> {
    x509_parser::parse_x509_certificate(der)
        .ok()
        .map(|(_, c)| c)
}

/// A usable CA at `now`: both halves parse, the key is the certificate's,
/// it is a CA and it has not expired.
fn usable_ca(cert: Option<&str>, key: Option<&str>, now: i64) -> Result<(PemPair, Info), String> {
    let (Some(cert), Some(key)) = (cert, key) else {
        return Err("missing".to_owned());
    };
    let info = inspect(cert)?;
    let pair = rcgen::KeyPair::from_pem(key).map_err(|e| e.to_string())?;
    if pair.public_key_raw() != info.spki.as_slice() {
        return Err("the key does not belong to the certificate".to_owned());
    }
    if !info.is_ca {
        return Err("not a CA certificate".to_owned());
    }
    if info.not_after <= now {
        return Err("expired".to_owned());
    }
    Ok((
        PemPair {
            cert: cert.to_owned(),
            key: key.to_owned(),
        },
        info,
    ))
}

/// Less than a third of `[not_before, not_after]` is left at `now`.
fn in_last_third(info: &Info, now: i64) -> bool {
    let lifetime = (info.not_after - info.not_before).max(0);
    info.not_after - now < lifetime / 3
}

fn at(unix: i64) -> Result<OffsetDateTime, CertError> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|_| CertError::Validity)
}

/// The Secret's contents after one look at `now`: `data` is what it holds
/// (key to text; anything may be missing or garbage), `injected` its
/// [`INJECTED_ANNOTATION`].
pub fn step(
    data: &BTreeMap<String, String>,
    injected: Option<&str>,
    settings: &Settings,
    now: OffsetDateTime,
) -> Result<Step, CertError> {
    let mut changes = Vec::new();
    let mut cas = Cas::read(data, settings, now, &mut changes)?;
    cas.start_rotation(settings, now, &mut changes)?;
    cas.finish_rotation(injected, settings, now.unix_timestamp(), &mut changes);
    let serving = serving_pair(data, &cas, settings, now, &mut changes)?;
    Ok(Step {
        stored: Stored {
            ca: cas.ca,
            serving,
            next_ca: cas.next.map(|(n, _)| n),
            previous_ca: cas.previous,
        },
        changes,
    })
}

/// The value of `key` in `data`, when it is there and not empty.
fn value<'a>(data: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    data.get(key).map(String::as_str).filter(|s| !s.is_empty())
}

/// The CAs of the Secret during one look: the current one, the next one
/// during a rotation, the previous one's certificate until it expires.
struct Cas {
    ca: PemPair,
    ca_info: Info,
    next: Option<(PemPair, Info)>,
    previous: Option<String>,
}

impl Cas {
    /// The CAs `data` holds, repaired: an expired or unreadable previous or
    /// next CA is dropped, and without a usable current CA the next one is
    /// promoted, or else a new CA generated.
    fn read(
        data: &BTreeMap<String, String>,
        settings: &Settings,
        now: OffsetDateTime,
        changes: &mut Vec<String>,
    ) -> Result<Cas, CertError> {
        let t = now.unix_timestamp();
        let get = |k: &str| value(data, k);
        let current = usable_ca(get(keys::CA_CERT), get(keys::CA_KEY), t);
        let next = usable_ca(get(keys::NEXT_CA_CERT), get(keys::NEXT_CA_KEY), t);
        let had_next = get(keys::NEXT_CA_CERT).is_some() || get(keys::NEXT_CA_KEY).is_some();
        let previous = get(keys::PREVIOUS_CA_CERT).and_then(|p| {
            inspect(p)
                .ok()
                .filter(|i| i.not_after > t)
                .map(|_| p.to_owned())
        });
        if previous.is_none() && get(keys::PREVIOUS_CA_CERT).is_some() {
            changes.push("dropped the previous CA (expired or unreadable)".to_owned());
        }
        let mut next = match next {
            Ok(n) => Some(n),
            Err(why) => {
                if had_next {
                    changes.push(format!("dropped the next CA ({why})"));
                }
                None
            }
        };
        let (ca, ca_info) = match current {
            Ok(c) => c,
            Err(why) => match next.take() {
                Some(n) => {
                    changes.push(format!("promoted the next CA (the current one is {why})"));
                    n
                }
                None => {
                    changes.push(format!("generated a CA (the current one is {why})"));
                    let ca =
                        certs::generate_ca_at("infergate-webhook-ca", settings.ca_validity, now)?;
                    let info = inspect(&ca.cert).map_err(|_| CertError::Validity)?;
                    (ca, info)
                }
            },
        };
        Ok(Cas {
            ca,
            ca_info,
            next,
            previous,
        })
    }

    /// Rotation of the CA: a next CA enters the bundle first, when a third
    /// of the current CA's lifetime is left...
    fn start_rotation(
        &mut self,
        settings: &Settings,
        now: OffsetDateTime,
        changes: &mut Vec<String>,
    ) -> Result<(), CertError> {
        if self.next.is_none() && in_last_third(&self.ca_info, now.unix_timestamp()) {
            let n = certs::generate_ca_at("infergate-webhook-ca", settings.ca_validity, now)?;
            let info = inspect(&n.cert).map_err(|_| CertError::Validity)?;
            changes.push(
                "generated the next CA (a third of the current CA's lifetime is left)".to_owned(),
            );
            self.next = Some((n, info));
        }
        Ok(())
    }

    /// ... and signs only once every caBundle holds it (`injected` names
    /// the bundle with it), after the overlap.
    fn finish_rotation(
        &mut self,
        injected: Option<&str>,
        settings: &Settings,
        t: i64,
        changes: &mut Vec<String>,
    ) {
        let Some((n, n_info)) = &self.next else {
            return;
        };
        let so_far = Stored {
            ca: self.ca.clone(),
            serving: PemPair {
                cert: String::new(),
                key: String::new(),
            },
            next_ca: Some(n.clone()),
            previous_ca: self.previous.clone(),
        };
        let in_bundles = injected == Some(bundle_id(&so_far).as_str());
        let since = t - (n_info.not_before + BACKDATE.as_secs() as i64);
        if in_bundles && since >= settings.ca_overlap.as_secs() as i64 {
            changes.push(format!("promoted the next CA ({since}s in every caBundle)"));
            self.previous = Some(self.ca.cert.clone());
            (self.ca, self.ca_info) = (n.clone(), n_info.clone());
            self.next = None;
        }
    }
}

/// The serving pair: the one `data` holds while it is sound, otherwise one
/// issued by the current CA for every SAN it or this replica names, never
/// outliving the CA.
fn serving_pair(
    data: &BTreeMap<String, String>,
    cas: &Cas,
    settings: &Settings,
    now: OffsetDateTime,
    changes: &mut Vec<String>,
) -> Result<PemPair, CertError> {
    let serving_cert = value(data, keys::TLS_CERT);
    let serving_key = value(data, keys::TLS_KEY);
    let existing = serving_cert.and_then(|c| inspect(c).ok());
    let reason = match (serving_cert, serving_key, &existing) {
        (Some(c), Some(k), Some(info)) => {
            serving_problem(c, k, info, &cas.ca_info, settings, now.unix_timestamp())
        }
        _ => Some("missing or unreadable".to_owned()),
    };
    let Some(why) = reason else {
        return Ok(PemPair {
            cert: serving_cert.unwrap_or_default().to_owned(),
            key: serving_key.unwrap_or_default().to_owned(),
        });
    };
    let mut dns = existing.as_ref().map(|i| i.dns.clone()).unwrap_or_default();
    let mut ips = existing.as_ref().map(|i| i.ips.clone()).unwrap_or_default();
    for d in &settings.dns_names {
        if !dns.contains(d) {
            dns.push(d.clone());
        }
    }
    for ip in &settings.ips {
        if !ips.contains(ip) {
            ips.push(*ip);
        }
    }
    let wanted = now
        .checked_add(
            time::Duration::try_from(settings.serving_validity).map_err(|_| CertError::Validity)?,
        )
        .ok_or(CertError::Validity)?;
    let not_after = wanted.min(at(cas.ca_info.not_after)?);
    changes.push(format!("issued a serving certificate ({why})"));
    certs::issue_serving_at(&cas.ca, &dns, &ips, now, not_after)
}

/// Why the serving pair must be reissued, if it must.
fn serving_problem(
    cert: &str,
    key: &str,
    info: &Info,
    ca: &Info,
    settings: &Settings,
    now: i64,
) -> Option<String> {
    if super::serving::parse_pem_pair(cert.as_bytes(), key.as_bytes()).is_err() {
        return Some("the key does not belong to the certificate".to_owned());
    }
    let signed = match (parsed(&info.der), parsed(&ca.der)) {
        (Some(c), Some(issuer)) => c.verify_signature(Some(issuer.public_key())).is_ok(),
        _ => false,
    };
    if !signed {
        return Some("not signed by the current CA".to_owned());
    }
    if info.not_after > ca.not_after {
        return Some("it would outlive its CA".to_owned());
    }
    // A certificate cut short by its CA's end gets no longer by reissuing:
    // it waits for the next CA.
    if in_last_third(info, now) && info.not_after < ca.not_after {
        return Some("a third of its lifetime is left".to_owned());
    }
    let missing_dns = settings.dns_names.iter().any(|d| !info.dns.contains(d));
    let missing_ip = settings.ips.iter().any(|ip| !info.ips.contains(ip));
    if missing_dns || missing_ip {
        return Some("a SAN this replica serves is missing".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dns: &[&str]) -> Settings {
        Settings {
            dns_names: dns.iter().map(|d| (*d).to_owned()).collect(),
            ips: vec!["127.0.0.1".parse().unwrap()],
            serving_validity: Duration::from_secs(90 * 86400),
            ca_validity: Duration::from_secs(365 * 86400),
            ca_overlap: Duration::from_secs(3600),
        }
    }

    fn data(s: &Stored) -> BTreeMap<String, String> {
        s.data()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn days(n: i64) -> time::Duration {
        time::Duration::days(n)
    }

    fn info(pem: &str) -> Info {
        inspect(pem).unwrap()
    }

    fn signed_by(cert: &str, ca: &str) -> bool {
        let (c, i) = (info(cert), info(ca));
        parsed(&c.der)
            .unwrap()
            .verify_signature(Some(parsed(&i.der).unwrap().public_key()))
            .is_ok()
    }

    fn fresh(now: OffsetDateTime) -> Stored {
        step(&BTreeMap::new(), None, &settings(&["a.svc"]), now)
            .unwrap()
            .stored
    }

    #[test]
    fn an_empty_secret_gets_a_ca_and_a_serving_certificate_and_then_rests() {
        let now = OffsetDateTime::now_utc();
        let s = fresh(now);
        assert!(signed_by(&s.serving.cert, &s.ca.cert));
        assert_eq!(s.next_ca, None);
        let again = step(&data(&s), None, &settings(&["a.svc"]), now + days(1)).unwrap();
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        assert_eq!(again.stored, s);
    }

    #[test]
    fn a_partial_or_corrupt_secret_is_repaired_keeping_a_usable_ca() {
        let now = OffsetDateTime::now_utc();
        let s = fresh(now);
        let mut partial = data(&s);
        partial.remove(keys::TLS_KEY);
        let r = step(&partial, None, &settings(&["a.svc"]), now).unwrap();
        assert_eq!(r.stored.ca, s.ca, "the CA is kept");
        assert!(signed_by(&r.stored.serving.cert, &s.ca.cert));
        assert!(
            super::super::serving::parse_pem_pair(
                r.stored.serving.cert.as_bytes(),
                r.stored.serving.key.as_bytes()
            )
            .is_ok()
        );

        let mut garbage = data(&s);
        garbage.insert(keys::TLS_CERT.to_owned(), "not a certificate".to_owned());
        let r = step(&garbage, None, &settings(&["a.svc"]), now).unwrap();
        assert_eq!(r.stored.ca, s.ca);
        assert!(
            r.changes
                .iter()
                .any(|c| c.contains("missing or unreadable")),
            "{:?}",
            r.changes
        );

        // A CA key that is not the certificate's: a new CA.
        let other = fresh(now);
        let mut mixed = data(&s);
        mixed.insert(keys::CA_KEY.to_owned(), other.ca.key.clone());
        let r = step(&mixed, None, &settings(&["a.svc"]), now).unwrap();
        assert_ne!(r.stored.ca.cert, s.ca.cert);
        assert!(r.changes[0].contains("does not belong"), "{:?}", r.changes);
        assert!(signed_by(&r.stored.serving.cert, &r.stored.ca.cert));

        // Only a serving pair: a new CA and a serving certificate under it.
        let mut only = BTreeMap::new();
        only.insert(keys::TLS_CERT.to_owned(), s.serving.cert.clone());
        let r = step(&only, None, &settings(&["a.svc"]), now).unwrap();
        assert!(signed_by(&r.stored.serving.cert, &r.stored.ca.cert));
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let now = OffsetDateTime::now_utc();
        // A CA with 200 of its 365 days gone: 165 left, more than a third.
        let born = now - days(200);
        let ca = certs::generate_ca_at("ca", Duration::from_secs(365 * 86400), born).unwrap();
        let mut d = BTreeMap::new();
        d.insert(keys::CA_CERT.to_owned(), ca.cert.clone());
        d.insert(keys::CA_KEY.to_owned(), ca.key.clone());
        let mut long = settings(&["a.svc"]);
        long.serving_validity = Duration::from_secs(400 * 86400);
        let r = step(&d, None, &long, now).unwrap();
        assert_eq!(r.stored.ca, ca);
        assert!(info(&r.stored.serving.cert).not_after <= info(&ca.cert).not_after);
        // A stored serving certificate that outlives its CA is reissued.
        let bad = certs::issue_serving_at(
            &ca,
            &["a.svc".into()],
            &["127.0.0.1".parse().unwrap()],
            now,
            now + days(400),
        )
        .unwrap();
        d.insert(keys::TLS_CERT.to_owned(), bad.cert);
        d.insert(keys::TLS_KEY.to_owned(), bad.key);
        let r = step(&d, None, &long, now).unwrap();
        assert!(
            r.changes.iter().any(|c| c.contains("outlive")),
            "{:?}",
            r.changes
        );
        // A CA near its end: the serving certificate it caps is not reissued
        // on every look (it could not get longer), only once the next CA signs.
        let old = now - days(300);
        let ca = certs::generate_ca_at("ca", Duration::from_secs(365 * 86400), old).unwrap();
        let mut d = BTreeMap::new();
        d.insert(keys::CA_CERT.to_owned(), ca.cert.clone());
        d.insert(keys::CA_KEY.to_owned(), ca.key.clone());
        let r = step(&d, None, &settings(&["a.svc"]), now).unwrap();
        assert_eq!(
            info(&r.stored.serving.cert).not_after,
            info(&ca.cert).not_after
        );
        let again = step(&data(&r.stored), None, &settings(&["a.svc"]), now + days(1)).unwrap();
        assert!(again.changes.is_empty(), "{:?}", again.changes);
    }

    #[test]
    fn the_ca_rotates_only_after_every_bundle_holds_the_next_one() {
        let set = settings(&["a.svc"]);
        let t0 = OffsetDateTime::now_utc() - days(250);
        let s = step(&BTreeMap::new(), None, &set, t0).unwrap().stored;
        let old_ca = s.ca.clone();

        // 250 days later (115 of 365 left): a next CA enters the bundle; the
        // serving certificate is still signed by the current CA.
        let now = OffsetDateTime::now_utc();
        let r = step(&data(&s), None, &set, now).unwrap();
        let next = r.stored.next_ca.clone().expect("next CA");
        assert_eq!(r.stored.ca, old_ca);
        assert!(signed_by(&r.stored.serving.cert, &old_ca.cert));
        let bundle = r.stored.bundle();
        assert!(bundle.contains(old_ca.cert.trim_end()) && bundle.contains(next.cert.trim_end()));

        // Not yet written into the caBundles: no promotion, even much later.
        let later = now + days(1);
        let waiting = step(&data(&r.stored), None, &set, later).unwrap();
        assert_eq!(waiting.stored.ca, old_ca);
        // Written, but the overlap has not passed: no promotion.
        let id = bundle_id(&r.stored);
        let early = step(
            &data(&r.stored),
            Some(&id),
            &set,
            now + time::Duration::minutes(10),
        )
        .unwrap();
        assert_eq!(early.stored.ca, old_ca, "{:?}", early.changes);
        // A stale record of another bundle: no promotion.
        let stale = step(&data(&r.stored), Some("00,11"), &set, later).unwrap();
        assert_eq!(stale.stored.ca, old_ca);
        // Written and the overlap passed: the next CA signs; the old one
        // stays trusted, the bundle is the same.
        let promoted = step(&data(&r.stored), Some(&id), &set, later).unwrap();
        assert_eq!(promoted.stored.ca, next);
        assert_eq!(
            promoted.stored.previous_ca.as_deref(),
            Some(old_ca.cert.as_str())
        );
        assert!(signed_by(&promoted.stored.serving.cert, &next.cert));
        assert_eq!(
            bundle_id(&promoted.stored),
            id,
            "no bundle change at promotion"
        );
        assert_eq!(promoted.stored.bundle(), r.stored.bundle());

        // Once the old CA has expired it leaves the bundle.
        let gone = step(&data(&promoted.stored), Some(&id), &set, now + days(120)).unwrap();
        assert_eq!(gone.stored.previous_ca, None, "{:?}", gone.changes);
        assert_eq!(gone.stored.ca, next);
    }

    #[test]
    fn replicas_with_different_sans_converge_on_the_union() {
        let now = OffsetDateTime::now_utc();
        let a = settings(&["a.svc"]);
        let b = settings(&["b.svc"]);
        let s = step(&BTreeMap::new(), None, &a, now).unwrap().stored;
        let s = step(&data(&s), None, &b, now).unwrap().stored;
        let i = info(&s.serving.cert);
        assert!(i.dns.contains(&"a.svc".to_owned()) && i.dns.contains(&"b.svc".to_owned()));
        for set in [&a, &b] {
            let r = step(&data(&s), None, set, now).unwrap();
            assert!(r.changes.is_empty(), "{:?}", r.changes);
        }
    }
}
