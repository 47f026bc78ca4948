//! Asynchronous events: what `ibv_get_async_event` returns.
//!
//! Layer: verbs. Owns [`AsyncEvent`] and its kinds, with libibverbs'
//! values. The device queues them; the caller polls
//! [`Device::poll_async_event`](crate::Device::poll_async_event).

use super::{Cq, Srq};
use crate::wire::Qpn;

/// What happened (`enum ibv_event_type`, libibverbs' values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AsyncEventKind {
    /// A completion found its CQ full (`IBV_EVENT_CQ_ERR`).
    CqErr = 0,
    /// The QP went to the Error state on an error of its own or of its
    /// connection (`IBV_EVENT_QP_FATAL`).
    QpFatal = 1,
    /// As responder, the QP received an invalid request
    /// (`IBV_EVENT_QP_REQ_ERR`).
    QpReqErr = 2,
    /// As responder, the QP refused an access (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessErr = 3,
    /// The SRQ's receives fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached = 14,
}

impl AsyncEventKind {
    pub const fn code(self) -> u32 {
        self as u32
    }

    pub const fn name(self) -> &'static str {
        match self {
            AsyncEventKind::CqErr => "IBV_EVENT_CQ_ERR",
            AsyncEventKind::QpFatal => "IBV_EVENT_QP_FATAL",
            AsyncEventKind::QpReqErr => "IBV_EVENT_QP_REQ_ERR",
            AsyncEventKind::QpAccessErr => "IBV_EVENT_QP_ACCESS_ERR",
            AsyncEventKind::SrqLimitReached => "IBV_EVENT_SRQ_LIMIT_REACHED",
        }
    }
}

/// The object an event is about (`element` of `struct ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventElement {
    Qp(Qpn),
    Cq(Cq),
    Srq(Srq),
}

/// An asynchronous event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    pub kind: AsyncEventKind,
    pub element: EventElement,
}
