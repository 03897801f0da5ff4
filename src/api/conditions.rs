//! How status conditions are written: as k8s-openapi writes a
//! [`Condition`], field for field and byte for byte, with its
//! `lastTransitionTime` formatted by jiff's RFC 3339 printer instead of the
//! `strtime` pattern k8s-openapi's `Time` goes through. The text is the
//! same for every time in years 0 to 9999 (seconds, fractions dropped, `Z`),
//! the printer is the cheaper of the two, and the conversion webhook writes a
//! condition for every v1alpha1 object it converts. Times outside those years
//! are written by k8s-openapi itself.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

/// `serialize_with` for a `Vec<Condition>` field.
pub fn serialize<S: Serializer>(
    conditions: &[Condition],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(conditions.len()))?;
    for condition in conditions {
        seq.serialize_element(&Written(condition))?;
    }
    seq.end()
}

/// One condition, as k8s-openapi writes it.
struct Written<'a>(&'a Condition);

impl Serialize for Written<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Every field named: a field k8s-openapi adds is a compile error here.
        let Condition {
            last_transition_time,
            message,
            observed_generation,
            reason,
            status,
            type_,
        } = self.0;
        let fields = 5 + usize::from(observed_generation.is_some());
        let mut state = serializer.serialize_struct("Condition", fields)?;
        state.serialize_field("lastTransitionTime", &WrittenTime(last_transition_time))?;
        state.serialize_field("message", message)?;
        if let Some(generation) = observed_generation {
            state.serialize_field("observedGeneration", generation)?;
        }
        state.serialize_field("reason", reason)?;
        state.serialize_field("status", status)?;
        state.serialize_field("type", type_)?;
        state.end()
    }
}

/// A `Time` as k8s-openapi writes it (`%Y-%m-%dT%H:%M:%SZ` in UTC).
struct WrittenTime<'a>(&'a Time);

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the seconds whose year
/// both formats write with four digits.
const FIRST_SECOND: i64 = -62_167_219_200;
const LAST_SECOND: i64 = 253_402_300_799;

impl Serialize for WrittenTime<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let time = self.0.0;
        // The whole second at or before the time (`%S` drops the fraction,
        // also before 1970, where the fraction is negative).
        let second = time.as_second() - i64::from(time.subsec_nanosecond() < 0);
        match jiff::Timestamp::from_second(second) {
            Ok(whole) if (FIRST_SECOND..=LAST_SECOND).contains(&second) => {
                serializer.collect_str(&whole)
            }
            _ => self.0.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(time: jiff::Timestamp, generation: Option<i64>) -> Condition {
        Condition {
            last_transition_time: Time(time),
            message: "2/2 \"replicas\" ready\n".to_owned(),
            observed_generation: generation,
            reason: "Ready".to_owned(),
            status: "True".to_owned(),
            type_: "Ready".to_owned(),
        }
    }

    #[derive(Serialize)]
    struct Ours<'a>(#[serde(serialize_with = "serialize")] &'a [Condition]);

    #[test]
    fn conditions_are_written_as_k8s_openapi_writes_them() {
        let mut seconds = vec![
            0,
            -1,
            1,
            FIRST_SECOND,
            FIRST_SECOND + 1,
            LAST_SECOND,
            LAST_SECOND - 1,
            1_795_694_400,
            951_782_400,    // 2000-02-29
            -2_208_988_800, // 1900-01-01
            jiff::Timestamp::MIN.as_second(),
            jiff::Timestamp::MAX.as_second(),
        ];
        // A spread over the years both formats write.
        let mut s = FIRST_SECOND;
        while s < LAST_SECOND {
            seconds.push(s);
            s += 7_777_777_777 / 97 + 13;
        }
        for second in seconds {
            for nanos in [0, 1, 999_999_999, -1, -999_999_999] {
                let Ok(time) = jiff::Timestamp::new(second, nanos) else {
                    continue;
                };
                for generation in [None, Some(3)] {
                    let conditions = [condition(time, generation), condition(time, None)];
                    let theirs = serde_json::to_string(&conditions).unwrap();
                    let ours = serde_json::to_string(&Ours(&conditions)).unwrap();
                    assert_eq!(ours, theirs, "{time:?}");
                }
            }
        }
    }
}
