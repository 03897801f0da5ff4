//! `POST /convert`: apiextensions.k8s.io/v1 ConversionReview, answered with
//! the engine's lossless conversion, objects in order, in memory bounded by
//! the body.
//!
//! The review is read in one pass with a [`Cursor`]: `objects` is visited
//! element by element, each object read key by key over the body and
//! converted at once, its answer written straight into the response;
//! nothing of the whole review is ever held as a tree. The API server
//! writes `uid` and `desiredAPIVersion` before `objects`; a review that
//! does not is read a second time, the objects skipped on the first pass.
//!
//! One object: `apiVersion`, `kind`, `spec` and `status` are read typed
//! (spec and status into the typed structs of their version, by
//! serde_json), `metadata` as one slice, found and checked as JSON by the
//! [`scan`](crate::webhook::scan) module's scanner (faster than serde_json
//! over managed fields and escape-dense annotations). It is written back
//! verbatim ([`write`]) but for the `infergate.dev/conversion-data`
//! annotation, which is all the typed conversion
//! ([`crate::api::conversion`]) reads or writes of it. Only when its bytes
//! may hold that annotation, or the conversion has a stash to add, is
//! `metadata` read key by key.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::api::conversion::{self, ConversionError, V1ALPHA1, V1BETA1};
use crate::api::{CONVERSION_DATA_ANNOTATION, v1alpha1, v1beta1};
use crate::metrics::Metrics;
use crate::telemetry::Bounded;
use crate::webhook::scan::Cursor;

mod write;

use write::write_unchanged;

/// The review's `apiVersion`.
const API_VERSION: &str = "apiextensions.k8s.io/v1";
/// The review's `kind`.
const KIND: &str = "ConversionReview";

/// The answer is written in pieces of about this size: no buffer is ever
/// grown (and copied) to the size of the whole answer.
const PIECE: usize = 1 << 20;

/// Answer a ConversionReview body: the response's JSON bytes. Always a
/// ConversionReview: a body that cannot be read, or an object that cannot
/// be converted, gets `result.status: Failure` with the reason (the first
/// failing object fails the whole review, as the API server needs all or
/// nothing).
#[must_use]
pub fn convert_review(body: &[u8], metrics: &Metrics) -> Vec<u8> {
    convert_review_pieces(body, metrics).concat()
}

/// [`convert_review`] as consecutive pieces of about 1 MiB, to be sent one
/// after the other.
#[must_use]
pub fn convert_review_pieces(body: &[u8], metrics: &Metrics) -> Vec<Vec<u8>> {
    let mut pieces = Pieces {
        done: Vec::new(),
        current: Vec::with_capacity((body.len() + 256).min(PIECE + PIECE / 4)),
    };
    let mut tally = Tally::default();
    // simdutf8's checker: a third of std's instructions on a review's
    // mostly ASCII bytes (std's check was 5% of the conversion thread's
    // time on a 1.6 MB review); its `compat` error says where the bytes
    // stop being UTF-8, as std's does.
    let answer = match simdutf8::compat::from_utf8(body) {
        Err(e) => Err(Box::new(Failure::unreadable(&e.to_string()))),
        Ok(text) => read_and_convert(text, &mut pieces, &mut tally),
    };
    tally.record(metrics);
    match answer {
        Ok(()) => pieces.finish(),
        Err(failure) => {
            if let Some(object) = &failure.object {
                tracing::warn!(
                    index = object.index,
                    name = %Bounded(&object.name),
                    from = %Bounded(&object.from),
                    to = %Bounded(&failure.desired),
                    error = %Bounded(&failure.message),
                    "conversion failed"
                );
            }
            let mut out = Vec::new();
            failure.write(&mut out);
            vec![out]
        }
    }
}

/// The answer being written: full pieces and the current one.
#[derive(Default)]
struct Pieces {
    done: Vec<Vec<u8>>,
    current: Vec<u8>,
}

impl Pieces {
    /// Start a new piece when the current one is full (between objects).
    fn cut(&mut self) {
        if self.current.len() >= PIECE {
            let full = std::mem::replace(&mut self.current, Vec::with_capacity(PIECE + PIECE / 4));
            self.done.push(full);
        }
    }

    fn clear(&mut self) {
        self.done.clear();
        self.current.clear();
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.done.push(self.current);
        self.done
    }
}

/// Convert one InferenceService object (JSON) to `desired` and return its
/// JSON: what [`convert_review`] writes for each object.
pub fn convert_object(object: &str, desired: &str) -> Result<Vec<u8>, ConversionError> {
    let mut cursor = Cursor::new(object);
    let parsed = read_object(&mut cursor, "", &mut None)
        .and_then(|parsed| cursor.end().map(|()| parsed))
        .map_err(ConversionError::Decode)?;
    let mut out = Vec::with_capacity(object.len() + 64);
    write_converted(parsed, desired, &mut out)?;
    Ok(out)
}

/// Why a review failed, and which object.
struct Failure {
    uid: String,
    desired: String,
    message: String,
    object: Option<FailedObject>,
}

struct FailedObject {
    index: usize,
    name: String,
    from: String,
}

impl Failure {
    fn unreadable(e: &str) -> Self {
        Failure {
            uid: String::new(),
            desired: String::new(),
            message: format!(
                "request body is not an apiextensions.k8s.io/v1 ConversionReview: {}",
                Bounded(e)
            ),
            object: None,
        }
    }

    /// The failed ConversionReview (uid echoed, `convertedObjects` empty).
    fn write(&self, out: &mut Vec<u8>) {
        let answer = serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "response": {
                "uid": self.uid,
                "result": {"status": "Failure", "message": self.message, "reason": "ConversionFailed"},
                "convertedObjects": [],
            }
        });
        // Serializing a json! value into a Vec cannot fail.
        let _ = serde_json::to_writer(out, &answer);
    }
}

/// Objects converted per source version and result, recorded once per
/// review (a metric update per object would cost more than converting it).
#[derive(Default)]
struct Tally {
    desired: String,
    counts: BTreeMap<(&'static str, bool), u64>,
}

impl Tally {
    fn add(&mut self, from: &'static str, success: bool) {
        *self.counts.entry((from, success)).or_default() += 1;
    }

    fn record(&self, metrics: &Metrics) {
        for ((from, success), n) in &self.counts {
            metrics.conversions(from, &self.desired, *success, *n);
        }
    }
}

/// A served version, or "" (the metrics label it `unknown`).
fn served(api_version: &str) -> &'static str {
    match api_version {
        V1ALPHA1 => V1ALPHA1,
        V1BETA1 => V1BETA1,
        _ => "",
    }
}

/// The envelope, read once: `uid` and `desiredAPIVersion` before
/// `objects`, as the API server writes them, let the objects be converted
/// while they are read.
fn read_and_convert(text: &str, out: &mut Pieces, tally: &mut Tally) -> Result<(), Box<Failure>> {
    let mut reader = Envelope {
        out,
        tally,
        pass: Pass::First,
        header: Header::default(),
        failure: None,
    };
    let mut cursor = Cursor::new(text);
    let read = reader.read(&mut cursor).and_then(|()| cursor.end());
    if let Some(failure) = reader.failure.take() {
        return Err(failure);
    }
    if let Err(e) = read {
        return Err(Box::new(Failure::unreadable(&e)));
    }
    let header = std::mem::take(&mut reader.header);
    check_header(&header)?;
    if reader.pass == Pass::First && !header.converted {
        // `objects` came before the fields needed to convert them, or not at all.
        reader.out.clear();
        reader.pass = Pass::Second;
        // Absent fields read as empty now: every object is converted (or
        // fails, to an empty desired version) on this pass.
        reader.header = Header {
            uid: Some(header.uid.clone().unwrap_or_default()),
            desired: Some(header.desired.clone().unwrap_or_default()),
            ..Header::default()
        };
        let read = reader.read(&mut Cursor::new(text));
        if let Some(failure) = reader.failure.take() {
            return Err(failure);
        }
        read.map_err(|e| Box::new(Failure::unreadable(&e)))?;
        if !reader.header.converted {
            // No objects at all: an empty list converts to an empty list.
            reader.header.uid = header.uid.clone();
            reader.header.desired = header.desired.clone();
            reader.start_answer();
        }
    } else if !header.converted {
        reader.header = header;
        reader.start_answer();
    }
    reader.out.current.extend_from_slice(b"]}}");
    Ok(())
}

/// What the envelope says besides its objects.
#[derive(Default)]
struct Header {
    api_version: Option<String>,
    kind: Option<String>,
    has_request: bool,
    uid: Option<String>,
    desired: Option<String>,
    /// The answer's head is written and the objects converted into it.
    converted: bool,
}

fn check_header(header: &Header) -> Result<(), Box<Failure>> {
    let api_version = header.api_version.as_deref().unwrap_or_default();
    let kind = header.kind.as_deref().unwrap_or_default();
    let failure = |message: String| {
        Box::new(Failure {
            uid: header.uid.clone().unwrap_or_default(),
            desired: header.desired.clone().unwrap_or_default(),
            message,
            object: None,
        })
    };
    if api_version != API_VERSION || kind != KIND {
        return Err(failure(format!(
            "unsupported review type \"{}\"/\"{}\": expected apiextensions.k8s.io/v1 ConversionReview",
            Bounded(api_version),
            Bounded(kind)
        )));
    }
    if !header.has_request {
        return Err(failure("ConversionReview has no request".to_owned()));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Read everything; convert the objects if uid and desired came first.
    First,
    /// Read again only to convert the objects.
    Second,
}

/// The reader of one review and the writer of its answer.
struct Envelope<'o> {
    out: &'o mut Pieces,
    tally: &'o mut Tally,
    pass: Pass,
    header: Header,
    /// Set when an object failed (the read is then aborted).
    failure: Option<Box<Failure>>,
}

impl Envelope<'_> {
    /// Read the review (on the second pass, only to convert its objects).
    fn read(&mut self, cursor: &mut Cursor<'_>) -> Result<(), String> {
        let mut seen = Seen::default();
        cursor.object(|cursor, key| {
            seen.check(&key, &["apiVersion", "kind", "request"])?;
            match key.as_ref() {
                "apiVersion" if self.pass == Pass::First => {
                    self.header.api_version = Some(cursor.string()?.into_owned());
                }
                "kind" if self.pass == Pass::First => {
                    self.header.kind = Some(cursor.string()?.into_owned());
                }
                "request" => {
                    self.header.has_request = true;
                    self.read_request(cursor)?;
                }
                _ => cursor.skip()?,
            }
            Ok(())
        })
    }

    fn read_request(&mut self, cursor: &mut Cursor<'_>) -> Result<(), String> {
        let mut seen = Seen::default();
        cursor.object(|cursor, key| {
            seen.check(&key, &["uid", "desiredAPIVersion", "objects"])?;
            match key.as_ref() {
                "uid" if self.pass == Pass::First => {
                    self.header.uid = Some(cursor.string()?.into_owned());
                }
                "desiredAPIVersion" if self.pass == Pass::First => {
                    self.header.desired = Some(cursor.string()?.into_owned());
                }
                "objects" if self.ready_to_convert() && !self.header.converted => {
                    if self.pass == Pass::First {
                        // Conversion needs the review's type and target known good.
                        let partial = Header {
                            api_version: self.header.api_version.clone(),
                            kind: self.header.kind.clone(),
                            has_request: true,
                            uid: self.header.uid.clone(),
                            desired: self.header.desired.clone(),
                            converted: false,
                        };
                        let typed_ok = partial.api_version.is_some()
                            && partial.kind.is_some()
                            && check_header(&partial).is_ok();
                        if !typed_ok {
                            return cursor.skip();
                        }
                    }
                    self.start_answer();
                    self.convert_objects(cursor)?;
                }
                _ => cursor.skip()?,
            }
            Ok(())
        })
    }

    /// Read `objects`, converting each into the answer as it is read.
    fn convert_objects(&mut self, cursor: &mut Cursor<'_>) -> Result<(), String> {
        let desired = self.header.desired.clone().unwrap_or_default();
        self.tally.desired.clone_from(&desired);
        let mut index = 0usize;
        cursor.list(|cursor| {
            let mut failed = None;
            let object = match read_object(cursor, &desired, &mut failed) {
                Ok(object) => object,
                Err(e) => {
                    // Not an object at all, or a typed part that did not
                    // decode: the read cannot go on.
                    let (name, from, what) = match failed {
                        Some(f) => (f.name, f.from, ""),
                        None => (String::new(), "", "invalid object: "),
                    };
                    self.tally.add(from, false);
                    let message = if from.is_empty() {
                        format!(
                            "failed to convert object {index} to \"{}\": {what}{}",
                            Bounded(&desired),
                            Bounded(&e)
                        )
                    } else {
                        format!(
                            "failed to convert object {index} (\"{}\") from \"{from}\" to \"{}\": {}",
                            Bounded(&name),
                            Bounded(&desired),
                            Bounded(&e)
                        )
                    };
                    self.failure = Some(Box::new(Failure {
                        uid: self.header.uid.clone().unwrap_or_default(),
                        message,
                        desired: desired.clone(),
                        object: Some(FailedObject {
                            index,
                            name,
                            from: from.to_owned(),
                        }),
                    }));
                    return Err(e);
                }
            };
            self.out.cut();
            if index > 0 {
                self.out.current.push(b',');
            }
            let (metadata, from) = (object.metadata, object.api_version.clone());
            match write_converted(object, &desired, &mut self.out.current) {
                Ok(from) => self.tally.add(from, true),
                Err(e) => {
                    let (name, from) = (name_of(metadata), from.into_owned());
                    self.tally.add(served(&from), false);
                    self.failure = Some(Box::new(Failure {
                        uid: self.header.uid.clone().unwrap_or_default(),
                        message: format!(
                            "failed to convert object {index} (\"{}\") from \"{}\" to \"{}\": {}",
                            Bounded(&name),
                            Bounded(&from),
                            Bounded(&desired),
                            Bounded(&e.to_string())
                        ),
                        desired: desired.clone(),
                        object: Some(FailedObject { index, name, from }),
                    }));
                    return Err("conversion failed".to_owned());
                }
            }
            index += 1;
            Ok(())
        })
    }

    /// Write the answer up to the first object.
    fn start_answer(&mut self) {
        let uid = self.header.uid.as_deref().unwrap_or_default();
        let out = &mut self.out.current;
        out.extend_from_slice(
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":"#,
        );
        let _ = serde_json::to_writer(&mut *out, uid);
        out.extend_from_slice(br#","result":{"status":"Success"},"convertedObjects":["#);
        self.header.converted = true;
    }

    /// Whether the objects can be converted as they are read.
    fn ready_to_convert(&self) -> bool {
        self.header.uid.is_some() && self.header.desired.is_some()
    }
}

/// The fields of an envelope met so far: a review that repeats one is
/// malformed (readers disagree on which copy counts), and refused.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn check(&mut self, key: &str, fields: &[&'static str]) -> Result<(), String> {
        let Some(i) = fields.iter().position(|f| *f == key) else {
            return Ok(());
        };
        if self.0 & (1 << i) != 0 {
            return Err(format!("duplicate field `{}`", fields[i]));
        }
        self.0 |= 1 << i;
        Ok(())
    }
}

/// One object as read, in one pass over its bytes: `apiVersion` and
/// `kind`, `metadata` as a slice, and `spec` and `status` decoded typed
/// when the object is to be converted and its version is known by the
/// time they come (the API server writes `apiVersion` and `kind` first),
/// else as slices, decoded when converted. `metadata` is an object
/// (checked) or absent (also when `null`). Every slice is JSON checked by
/// the [`Cursor`]'s scanner.
struct ObjectIn<'a> {
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    metadata: Option<&'a str>,
    /// Whether a string in `metadata` holds a `\u` escape (which could
    /// spell the conversion annotation's name).
    metadata_unicode: bool,
    spec: Option<Part<'a, Spec>>,
    status: Option<Part<'a, Status>>,
    /// Any other top-level field, kept for a same-version answer.
    rest: RawMap<'a>,
}

/// `spec` or `status`: as a slice, or already decoded.
enum Part<'a, T> {
    Raw(&'a str),
    Typed(T),
}

/// A `spec` decoded in its version.
// One object at a time, moved along its conversion: a box would cost an
// allocation per object.
#[allow(clippy::large_enum_variant)]
enum Spec {
    V1alpha1(v1alpha1::InferenceServiceSpec),
    V1beta1(v1beta1::InferenceServiceSpec),
}

/// A `status` decoded in its version (`null` reads as none).
#[allow(clippy::large_enum_variant)]
enum Status {
    V1alpha1(Option<v1alpha1::InferenceServiceStatus>),
    V1beta1(Option<v1beta1::InferenceServiceStatus>),
}

/// `metadata.name`, for messages.
fn name_of(metadata: Option<&str>) -> String {
    metadata
        .and_then(|m| serde_json::from_str::<Metadata<'_>>(m).ok())
        .and_then(|m| {
            m.entries
                .iter()
                .find(|(k, _)| k == "name")
                .and_then(|(_, v)| serde_json::from_str::<String>(v).ok())
        })
        .unwrap_or_default()
}

impl ObjectIn<'_> {
    /// `metadata.name`, for messages.
    fn name(&self) -> String {
        name_of(self.metadata)
    }

    /// The version `spec` and `status` are decoded in as they are read:
    /// known, served, an InferenceService, and not the desired version.
    fn decode_as(&self, desired: &str) -> Option<&'static str> {
        let from = served(&self.api_version);
        let converts = !from.is_empty()
            && from != desired
            && self.kind == "InferenceService"
            && matches!(desired, V1ALPHA1 | V1BETA1);
        converts.then_some(from)
    }
}

/// Where an object whose `spec` or `status` failed to decode came from,
/// for the failure's message.
struct DecodeFailure {
    name: String,
    from: &'static str,
}

/// Read one object of a review converted to `desired` (`""`: every part
/// as a slice). `failed` is set when a typed `spec` or `status` failed to
/// decode (the read of the review stops there).
fn read_object<'a>(
    cursor: &mut Cursor<'a>,
    desired: &str,
    failed: &mut Option<DecodeFailure>,
) -> Result<ObjectIn<'a>, String> {
    let mut object = ObjectIn {
        api_version: Cow::Borrowed(""),
        kind: Cow::Borrowed(""),
        metadata: None,
        metadata_unicode: false,
        spec: None,
        status: None,
        rest: Vec::new(),
    };
    // An object that repeats one of these is refused: readers disagree
    // on which copy counts, and a typed part must match the version.
    let mut seen = Seen::default();
    let fields = ["apiVersion", "kind", "metadata", "spec", "status"];
    cursor.object(|cursor, key| {
        seen.check(&key, &fields)?;
        match key.as_ref() {
            "apiVersion" => object.api_version = cursor.string()?,
            "kind" => object.kind = cursor.string()?,
            "metadata" => {
                object.metadata = object_or_null(slice(cursor)?)?;
                object.metadata_unicode = cursor.saw_unicode_escape();
            }
            "spec" => {
                object.spec = Some(match object.decode_as(desired) {
                    Some(V1ALPHA1) => Part::Typed(Spec::V1alpha1(typed_value(
                        cursor, &object, V1ALPHA1, "spec", failed,
                    )?)),
                    Some(from) => Part::Typed(Spec::V1beta1(typed_value(
                        cursor, &object, from, "spec", failed,
                    )?)),
                    None => Part::Raw(slice(cursor)?),
                });
            }
            "status" => {
                object.status = Some(match object.decode_as(desired) {
                    Some(V1ALPHA1) => Part::Typed(Status::V1alpha1(typed_value(
                        cursor, &object, V1ALPHA1, "status", failed,
                    )?)),
                    Some(from) => Part::Typed(Status::V1beta1(typed_value(
                        cursor, &object, from, "status", failed,
                    )?)),
                    None => Part::Raw(slice(cursor)?),
                });
            }
            _ => object.rest.push((key, slice(cursor)?)),
        }
        Ok(())
    })?;
    Ok(object)
}

/// The next value as a slice, checked as JSON.
fn slice<'a>(cursor: &mut Cursor<'a>) -> Result<&'a str, String> {
    cursor.value().map_err(|e| e.to_string())
}

/// The next value decoded as `T`; a failure names the part and records
/// which object it was.
fn typed_value<'a, T: Deserialize<'a>>(
    cursor: &mut Cursor<'a>,
    object: &ObjectIn<'a>,
    from: &'static str,
    part: &str,
    failed: &mut Option<DecodeFailure>,
) -> Result<T, String> {
    cursor.typed().map_err(|e| {
        *failed = Some(DecodeFailure {
            name: object.name(),
            from,
        });
        format!("{part}: {e}")
    })
}

/// `metadata` as read: an object, or `null` (as if absent); anything else
/// is refused as the typed reading would.
fn object_or_null(raw: &str) -> Result<Option<&str>, String> {
    match raw.as_bytes().first() {
        Some(b'{') => Ok(Some(raw)),
        _ if raw == "null" => Ok(None),
        _ => serde_json::from_str::<Metadata<'_>>(raw)
            .map(|_| None)
            .map_err(|e| format!("metadata: {e}")),
    }
}

/// Whether some key of this `metadata` may be the conversion annotation:
/// its name appears, or a `\u` escape (`unicode`, seen by the scanner)
/// could spell it. Otherwise the object carries no stash and its metadata
/// can be copied as it is.
fn may_hold_stash(metadata: &str, unicode: bool) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static NAME: LazyLock<Finder<'static>> = LazyLock::new(|| {
        let name = CONVERSION_DATA_ANNOTATION.rsplit('/').next();
        Finder::new(name.unwrap_or(CONVERSION_DATA_ANNOTATION))
    });
    unicode || NAME.find(metadata.as_bytes()).is_some()
}

/// A JSON object, key by key, values as slices (JSON, checked).
type RawMap<'a> = Vec<(Cow<'a, str>, &'a str)>;

/// `metadata` read in the object's one pass: every key with its value as a
/// slice, and `annotations` (when a map) key by key as well.
struct Metadata<'a> {
    entries: RawMap<'a>,
    annotations: Option<RawMap<'a>>,
}

struct RawMapVisitor;

impl<'de> Visitor<'de> for RawMapVisitor {
    type Value = RawMap<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMap<'de>, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
            out.push((k, v.get()));
        }
        Ok(out)
    }
}

/// `annotations`: a map, or `null`.
struct Annotations<'a>(Option<RawMap<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: de::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct OptionVisitor;
        impl<'de> Visitor<'de> for OptionVisitor {
            type Value = Annotations<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations(None))
            }
            fn visit_some<D: de::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
                de.deserialize_map(RawMapVisitor)
                    .map(|m| Annotations(Some(m)))
            }
        }
        de.deserialize_option(OptionVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Metadata<'a> {
    fn deserialize<D: de::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct MetadataVisitor;
        impl<'de> Visitor<'de> for MetadataVisitor {
            type Value = Metadata<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata<'de>, A::Error> {
                let mut entries = Vec::new();
                let mut annotations = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "annotations" {
                        let Annotations(map) = map.next_value()?;
                        annotations = map;
                        // Kept in place (its slice is not needed: it is rewritten).
                        entries.push((key, "null"));
                    } else {
                        entries.push((key, map.next_value::<&'de RawValue>()?.get()));
                    }
                }
                Ok(Metadata {
                    entries,
                    annotations,
                })
            }
        }
        de.deserialize_map(MetadataVisitor)
    }
}

fn decode<'a, T: Deserialize<'a>>(raw: &'a str, what: &str) -> Result<T, ConversionError> {
    serde_json::from_str(raw).map_err(|e| ConversionError::Decode(format!("{what}: {e}")))
}

/// Convert one object to `desired`, appending its JSON to `out`; the
/// version it was in.
fn write_converted(
    object: ObjectIn<'_>,
    desired: &str,
    out: &mut Vec<u8>,
) -> Result<&'static str, ConversionError> {
    if desired != V1ALPHA1 && desired != V1BETA1 {
        return Err(ConversionError::UnsupportedVersion(desired.to_owned()));
    }
    if object.kind != "InferenceService" {
        return Err(ConversionError::UnsupportedKind(object.kind.to_string()));
    }
    let from = served(&object.api_version);
    if from.is_empty() {
        return Err(ConversionError::UnsupportedVersion(
            object.api_version.to_string(),
        ));
    }
    if from == desired {
        write_unchanged(&object, out)?;
        return Ok(from);
    }
    let ObjectIn {
        metadata,
        metadata_unicode,
        spec,
        status,
        ..
    } = object;
    let Some(spec) = spec else {
        return Err(ConversionError::Decode("missing field `spec`".to_owned()));
    };
    // Most objects hold no stash: their metadata is not even read, and is
    // copied as it is unless the conversion has something to stash.
    let parsed = match metadata {
        Some(raw) if may_hold_stash(raw, metadata_unicode) => Some(read_metadata(raw)?),
        _ => None,
    };
    let light = light_metadata(parsed.as_ref().and_then(|m| m.annotations.as_ref()))?;
    let typed = Typed::decode(from, spec, status, light)?;
    // A stash the conversion adds may need the object converted again
    // (below): kept only when the conversion can add one.
    let again = match (metadata, &parsed) {
        (Some(_), None) if typed.may_stash() => Some(typed.clone()),
        _ => None,
    };
    let converted = typed.convert()?;
    match (metadata, parsed) {
        (Some(raw), None) if converted.metadata().annotations.is_some() => {
            // A stash to add: the annotations it joins are read after all.
            // The stash records an empty map it was added to, which the
            // conversion could not see: made again when there is one.
            let parsed = read_metadata(raw)?;
            if parsed.annotations.as_ref().is_some_and(Vec::is_empty) {
                let light = light_metadata(parsed.annotations.as_ref())?;
                let Some(mut again) = again else {
                    return Err(ConversionError::Decode(
                        "internal: a conversion that cannot stash stashed".to_owned(),
                    ));
                };
                again.set_metadata(light);
                again.convert()?.write(out, Some(&parsed))
            } else {
                converted.write(out, Some(&parsed))
            }
        }
        (Some(raw), None) => converted.write_with_raw_metadata(out, raw),
        (_, parsed) => converted.write(out, parsed.as_ref()),
    }?;
    Ok(from)
}

/// `metadata`, key by key.
fn read_metadata<'a>(raw: &'a str) -> Result<Metadata<'a>, ConversionError> {
    serde_json::from_str::<Metadata<'a>>(raw)
        .map_err(|e| ConversionError::Decode(format!("metadata: {e}")))
}

/// An object converted, typed, with the light metadata the conversion saw.
// One at a time, on the stack for the length of one object's write: a box
// would cost an allocation per object.
#[allow(clippy::large_enum_variant)]
enum Converted {
    V1beta1(v1beta1::InferenceService),
    V1alpha1(v1alpha1::InferenceService),
}

/// `spec` or `status` (`what`) in version `from`: decoded now when read as
/// a slice, taken when `typed` finds it decoded in that version.
fn in_version<'a, P, T: Deserialize<'a>>(
    part: Part<'a, P>,
    what: &str,
    from: &str,
    typed: impl FnOnce(P) -> Option<T>,
) -> Result<T, ConversionError> {
    match part {
        Part::Raw(raw) => decode(raw, what),
        Part::Typed(p) => typed(p).ok_or_else(|| {
            ConversionError::Decode(format!("{what} does not match apiVersion {from}"))
        }),
    }
}

/// An object to convert, typed in its version, with light metadata.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum Typed {
    V1alpha1(v1alpha1::InferenceService),
    V1beta1(v1beta1::InferenceService),
}

impl Typed {
    /// `spec` and `status` in version `from` (decoded now when read as
    /// slices), with `light` metadata.
    fn decode(
        from: &str,
        spec: Part<'_, Spec>,
        status: Option<Part<'_, Status>>,
        light: ObjectMeta,
    ) -> Result<Self, ConversionError> {
        if from == V1ALPHA1 {
            let spec = in_version(spec, "spec", from, |s| match s {
                Spec::V1alpha1(s) => Some(s),
                Spec::V1beta1(_) => None,
            })?;
            let status = status.map(|p| {
                in_version(p, "status", from, |s| match s {
                    Status::V1alpha1(s) => Some(s),
                    Status::V1beta1(_) => None,
                })
            });
            Ok(Self::V1alpha1(v1alpha1::InferenceService {
                metadata: light,
                spec,
                status: status.transpose()?.flatten(),
            }))
        } else {
            let spec = in_version(spec, "spec", from, |s| match s {
                Spec::V1beta1(s) => Some(s),
                Spec::V1alpha1(_) => None,
            })?;
            let status = status.map(|p| {
                in_version(p, "status", from, |s| match s {
                    Status::V1beta1(s) => Some(s),
                    Status::V1alpha1(_) => None,
                })
            });
            Ok(Self::V1beta1(v1beta1::InferenceService {
                metadata: light,
                spec,
                status: status.transpose()?.flatten(),
            }))
        }
    }

    /// Whether converting it can add a stash: v1beta1 says everything a
    /// v1alpha1 object that converts exactly says; a v1beta1 object most
    /// often says more than v1alpha1 can.
    fn may_stash(&self) -> bool {
        match self {
            Self::V1alpha1(a) => !conversion::up_is_exact(a),
            Self::V1beta1(_) => true,
        }
    }

    fn set_metadata(&mut self, light: ObjectMeta) {
        match self {
            Self::V1alpha1(a) => a.metadata = light,
            Self::V1beta1(b) => b.metadata = light,
        }
    }

    /// Convert it to the other version.
    fn convert(self) -> Result<Converted, ConversionError> {
        match self {
            Self::V1alpha1(a) => Ok(Converted::V1beta1(conversion::into_v1beta1(a)?)),
            Self::V1beta1(b) => Ok(Converted::V1alpha1(conversion::into_v1alpha1(b)?)),
        }
    }
}

/// What the typed conversion reads of `metadata`: whether there is an
/// `annotations` map, whether it holds anything but the conversion
/// annotation, and the value of that annotation.
fn light_metadata(annotations: Option<&RawMap<'_>>) -> Result<ObjectMeta, ConversionError> {
    /// Stands for every other annotation: the typed conversion only asks
    /// whether there are any.
    const OTHERS: &str = "infergate.dev/other-annotations";
    let Some(annotations) = annotations else {
        return Ok(ObjectMeta::default());
    };
    let mut light = BTreeMap::new();
    for (k, v) in annotations {
        if k == CONVERSION_DATA_ANNOTATION {
            let stash = decode::<String>(v, "the conversion annotation")?;
            light.insert(CONVERSION_DATA_ANNOTATION.to_owned(), stash);
        } else if !light.contains_key(OTHERS) {
            light.insert(OTHERS.to_owned(), String::new());
        }
    }
    Ok(ObjectMeta {
        annotations: Some(light),
        ..ObjectMeta::default()
    })
}
