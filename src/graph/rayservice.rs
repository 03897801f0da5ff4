//! The `ray.io/v1` RayService types and the pure builder.
