use actix_web::ResponseError;
use actix_web::http::StatusCode;
use contracts::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    /// Every invalid field of a form-like request at once.
    #[error("{0}")]
    Fields(#[from] contracts::FieldErrors),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InsufficientCapacity(String),
    #[error("{0}")]
    PriceAboveMax(String),
    /// A moment's state that a retry gets past (a reserved block whose
    /// start the sweeper has not handed over yet): `UNAVAILABLE`, which
    /// ordering treats as a dependency's answer, not as the order's.
    #[error("{0}")]
    Retry(String),
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Two bookings of one GPU at once, refused by `catalog.booked_gpus`'
    /// exclusion constraint: a race lost for capacity, never an internal error.
    fn double_booking(&self) -> bool {
        matches!(
            self,
            Error::Database(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ExclusionViolation,
                _,
            ))
        )
    }

    pub fn code(&self) -> ErrorCode {
        if self.double_booking() {
            return ErrorCode::InsufficientCapacity;
        }
        match self {
            Error::Validation(_) | Error::Fields(_) => ErrorCode::Validation,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::InsufficientCapacity(_) => ErrorCode::InsufficientCapacity,
            Error::PriceAboveMax(_) => ErrorCode::PriceAboveMax,
            Error::Retry(_) => ErrorCode::Unavailable,
            Error::Platform(_) | Error::Database(_) | Error::Io(_) => ErrorCode::Internal,
        }
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        platform::http::status_for(self.code())
    }

    fn error_response(&self) -> actix_web::HttpResponse {
        let details = match self {
            Error::Fields(fields) => Some(fields.details()),
            _ => None,
        };
        if self.double_booking() {
            return platform::http::error_response_with_details(
                self.code(),
                &"the machine's GPUs are booked for those hours",
                details,
            );
        }
        platform::http::error_response_with_details(self.code(), self, details)
    }
}
