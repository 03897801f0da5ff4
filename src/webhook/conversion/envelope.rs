//! The review's envelope: `apiVersion`, `kind` and `request` with its
//! `uid`, `desiredAPIVersion` and `objects`, read in one pass (two when
//! `objects` comes first), the objects converted as they are read. A
//! review without a `uid` or a `desiredAPIVersion` (or with an empty one)
//! fails, naming the field.

use super::convert::write_converted;
use super::failure::{API_VERSION, FailedObject, Failure, KIND};
use super::metadata::name_of;
use super::object::{read_object, served};
use super::output::{Pieces, Tally};
use super::scan::Cursor;
use super::seen::SeenFields;
use crate::telemetry::Bounded;

/// The envelope, read once: `uid` and `desiredAPIVersion` before
/// `objects`, as the API server writes them, let the objects be converted
/// while they are read.
pub(super) fn read_and_convert(
    text: &str,
    out: &mut Pieces,
    tally: &mut Tally,
) -> Result<(), Box<Failure>> {
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
    if !header.converted {
        // `objects` came before the fields needed to convert them, or not at all.
        reader.out.clear();
        reader.pass = Pass::Second;
        reader.header = Header {
            uid: header.uid,
            desired: header.desired,
            ..Header::default()
        };
        let read = reader.read(&mut Cursor::new(text));
        if let Some(failure) = reader.failure.take() {
            return Err(failure);
        }
        read.map_err(|e| Box::new(Failure::unreadable(&e)))?;
        if !reader.header.converted {
            // No objects at all: an empty list converts to an empty list.
            reader.start_answer();
        }
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
    // The answer must echo the uid, and every object needs a version to
    // be converted to: a review without either cannot be answered.
    for (field, value) in [
        ("request.uid", &header.uid),
        ("request.desiredAPIVersion", &header.desired),
    ] {
        match value.as_deref() {
            None => return Err(failure(format!("ConversionReview has no {field}"))),
            Some("") => return Err(failure(format!("ConversionReview has an empty {field}"))),
            Some(_) => {}
        }
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
        let mut seen = SeenFields::default();
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
        let mut seen = SeenFields::default();
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
