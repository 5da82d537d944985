//! The protobuf codec, with one change from `tonic-prost`'s: bytes that do
//! not decode are the client's fault, answered `INVALID_ARGUMENT` (tonic's
//! codec answers `INTERNAL`, a server error).

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// `tonic-prost`'s codec with decode errors mapped to `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec {
            _types: PhantomData,
        }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder { _type: PhantomData }
    }
}

/// Decodes with prost; a malformed message is `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct StrictDecoder<U> {
    _type: PhantomData<U>,
}

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|error| Status::invalid_argument(format!("malformed protobuf: {error}")))
    }
}
