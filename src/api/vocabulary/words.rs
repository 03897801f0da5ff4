//! How a closed set of words is declared: an enum whose variants each
//! spell one word, with `as_str`, `FromStr`, `Display` and comparison
//! with the word itself.

/// A word [`FromStr`](std::str::FromStr) does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {word:?}")]
pub struct UnknownWord {
    /// What was parsed (`condition type`, `reason`...).
    pub kind: &'static str,
    /// The word as given.
    pub word: String,
}

/// An enum of words: `words! { /// doc \n pub enum Name("kind") { /// doc \n Variant => "Word", ... } }`.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident($kind:literal) {
            $( $(#[$vmeta:meta])* $variant:ident => $word:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every word, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)*];

            /// The word, as the API carries it.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $word, )*
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::api::vocabulary::UnknownWord;

            fn from_str(word: &str) -> Result<Self, Self::Err> {
                match word {
                    $( $word => Ok(Self::$variant), )*
                    _ => Err($crate::api::vocabulary::UnknownWord {
                        kind: $kind,
                        word: word.to_owned(),
                    }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl From<$name> for String {
            fn from(word: $name) -> Self {
                word.as_str().to_owned()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == other.as_str()
            }
        }
    };
}

pub(crate) use words;
