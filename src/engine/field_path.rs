//! Field paths in the Kubernetes style (`field.Path`): each rule is given
//! the path of the field it judges by its caller, and renders it only when
//! it reports an error.
//!
//! A path is a borrowed list built on the stack, child to parent: making
//! one allocates nothing, so a rule that finds nothing wrong costs no more
//! than before. `Display` gives `spec.engine.env[0].name` and
//! `spec.placement.nodeSelector[zone]`.

use std::fmt;

/// One step of a [`Path`].
#[derive(Clone, Copy, Debug)]
enum Segment<'a> {
    /// A field name: `.name` (or `name` at the root).
    Field(&'a str),
    /// A list index: `[i]`.
    Index(usize),
    /// A map key: `[key]`.
    Key(&'a str),
}

/// The path of a field, as a chain of borrowed steps back to its root.
#[derive(Clone, Copy, Debug)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    segment: Segment<'a>,
}

impl<'a> Path<'a> {
    /// A path of one field, such as `spec`.
    #[must_use]
    pub const fn new(root: &'a str) -> Self {
        Self {
            parent: None,
            segment: Segment::Field(root),
        }
    }

    /// The field `name` under this path: `spec` -> `spec.engine`.
    #[must_use]
    pub const fn child(&'a self, name: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Field(name),
        }
    }

    /// Item `i` of the list at this path: `spec.engine.env` -> `spec.engine.env[0]`.
    #[must_use]
    pub const fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Index(i),
        }
    }

    /// Entry `key` of the map at this path: `spec.placement.nodeSelector[zone]`.
    #[must_use]
    pub const fn key(&'a self, key: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Key(key),
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parent) = self.parent {
            parent.fmt(f)?;
        }
        match self.segment {
            Segment::Field(name) if self.parent.is_none() => f.write_str(name),
            Segment::Field(name) => write!(f, ".{name}"),
            Segment::Index(i) => write!(f, "[{i}]"),
            Segment::Key(key) => write!(f, "[{key}]"),
        }
    }
}

impl From<&Path<'_>> for String {
    fn from(path: &Path<'_>) -> Self {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::Path;

    #[test]
    fn paths_render_as_kubernetes_field_paths() {
        let spec = Path::new("spec");
        let engine = spec.child("engine");
        let env = engine.child("env");
        let item = env.index(3);
        assert_eq!(item.child("name").to_string(), "spec.engine.env[3].name");
        assert_eq!(String::from(&env), "spec.engine.env");
        let placement = spec.child("placement");
        let selector = placement.child("nodeSelector");
        assert_eq!(
            selector.key("zone").to_string(),
            "spec.placement.nodeSelector[zone]"
        );
        assert_eq!(spec.to_string(), "spec");
    }
}
