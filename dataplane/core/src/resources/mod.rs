//! Transaction resources: the four pools, their regions, credits and
//! admission (OCP Falcon 0.9 §8.2).
//!
//! Layer: transaction sublayer, node-wide accounting. Owns [`Resources`] —
//! the global counters of every (pool, region) pair, the per-function and
//! per-host credit counters, the head-of-line green/red zone of the
//! network-request region and the dynamic-threshold isolation between
//! connections — plus the per-connection [`CreditCounter`], the
//! [`Demand`] of each transaction phase. Pure counting: it never sees a packet, never allocates
//! per transaction (after warm-up) and never panics in release builds (debug
//! builds assert that nothing is released that was not reserved).
//!
//! # Pools, regions and credits
//!
//! §8.2.2: four pools (Tx packet, Tx buffer, Rx packet, Rx buffer), carved
//! into ULP-request (all four), ULP-data (Tx only) and network-request (Rx
//! only) regions. §8.2.3–8.2.4 name one credit counter per (pool, region),
//! so a [`Credit`] is exactly one region:
//!
//! | credit | pool | region | charged by |
//! |---|---|---|---|
//! | `ReqPktTx` / `ReqBufTx` | Tx packet / Tx buffer | ULP request | Push Data, Pull Request at the initiator |
//! | `ReqPktRx` / `ReqBufRx` | Rx packet / Rx buffer | ULP request | Push completion, Pull Data (proactive, at submit) |
//! | `DataPktTx` / `DataBufTx` | Tx packet / Tx buffer | ULP data | Pull Data at the target |
//! | `NetReqPktRx` / `NetReqBufRx` | Rx packet / Rx buffer | network request | Push Data, Pull Request received |
//!
//! Buffer credits count cells of `cell_size` bytes: ceil(L / N) (§8.2.3).
//! Every reservation is checked against three levels of per-entity limits
//! (connection, function, host; oversubscribed: their sums may exceed the
//! pool) and the global region capacity (§8.2.3: "a set of global credit
//! counters are used" to prevent overrun).
//!
//! # Network requests: HoL zones and dynamic thresholds
//!
//! §8.2.4: past a threshold of the network-request Rx buffer region the
//! node is in the red zone and accepts only head-of-line requests (CR rule
//! #3). We apply the zone to both network-request regions (packets and
//! cells; isekai takes the max over its pools), and a HoL request also
//! bypasses the per-entity limits and the dynamic threshold, checked only
//! against the hard capacity: a connection whose non-HoL requests exhausted
//! its own credits while waiting for the HoL would otherwise deadlock.
//! Non-HoL requests in the green zone must also pass the connection's
//! dynamic threshold (Choudhury–Hahne, as switch buffers do): its held
//! network credits may not exceed `alpha` × the region's free space. `alpha`
//! is per connection ([`Alpha`]), settable at run time (by the RUE policy
//! or the CM; the rev 0.9 RUE result has no field for it), so a connection
//! whose ULP stops consuming cannot take the region from the others.

use core::fmt;

/// One of the eight credit counters (= one pool region).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credit {
    /// Request Tx packets (ULP request region of the Tx packet pool).
    ReqPktTx,
    /// Request Tx buffer cells.
    ReqBufTx,
    /// Request Rx packets (ULP request region of the Rx packet pool).
    ReqPktRx,
    /// Request Rx buffer cells.
    ReqBufRx,
    /// Data (Pull Data) Tx packets (ULP data region of the Tx packet pool).
    DataPktTx,
    /// Data Tx buffer cells.
    DataBufTx,
    /// Network request Rx packets (network-request region of the Rx
    /// packet pool).
    NetReqPktRx,
    /// Network request Rx buffer cells.
    NetReqBufRx,
}

impl Credit {
    /// Every credit, in index order.
    pub const ALL: [Credit; 8] = [
        Credit::ReqPktTx,
        Credit::ReqBufTx,
        Credit::ReqPktRx,
        Credit::ReqBufRx,
        Credit::DataPktTx,
        Credit::DataBufTx,
        Credit::NetReqPktRx,
        Credit::NetReqBufRx,
    ];

    /// Position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            Credit::ReqPktTx => "req_pkt_tx",
            Credit::ReqBufTx => "req_buf_tx",
            Credit::ReqPktRx => "req_pkt_rx",
            Credit::ReqBufRx => "req_buf_rx",
            Credit::DataPktTx => "data_pkt_tx",
            Credit::DataBufTx => "data_buf_tx",
            Credit::NetReqPktRx => "net_req_pkt_rx",
            Credit::NetReqBufRx => "net_req_buf_rx",
        }
    }

    /// Whether this credit belongs to a network-request region.
    pub const fn is_network_request(self) -> bool {
        matches!(self, Credit::NetReqPktRx | Credit::NetReqBufRx)
    }

    /// The ULP credit class it counts against (`None` for the
    /// network-request regions, which are not the ULP's).
    pub const fn class(self) -> Option<CreditClass> {
        match self {
            Credit::ReqPktTx | Credit::ReqBufTx | Credit::ReqPktRx | Credit::ReqBufRx => {
                Some(CreditClass::Request)
            }
            Credit::DataPktTx | Credit::DataBufTx => Some(CreditClass::Data),
            Credit::NetReqPktRx | Credit::NetReqBufRx => None,
        }
    }
}

/// The two classes of ULP credits a connection's flow control stops and
/// starts apart (OCP Falcon 0.9 §8.2.3): the request credits (Req Pkt/Buf
/// Tx and Rx, taken by the initiator's pushes and pulls) and the data
/// credits (Data Pkt/Buf Tx, taken by the target's Pull Data). A ULP told
/// `Xoff` for requests may go on answering pulls (RDMA over Falcon: Read
/// Responses keep flowing while requests are stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreditClass {
    /// Pushes and Pull Requests.
    Request = 0,
    /// Pull Data.
    Data = 1,
}

impl CreditClass {
    /// Both classes, in index order.
    pub const ALL: [CreditClass; 2] = [CreditClass::Request, CreditClass::Data];

    /// Position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A stable name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            CreditClass::Request => "request",
            CreditClass::Data => "data",
        }
    }
}

/// Units of each credit one transaction phase holds (packets or cells).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Demand {
    units: [u32; 8],
}

/// Lane masks of the Tx pools' credits (ReqPktTx, ReqBufTx, DataPktTx,
/// DataBufTx) and of the Rx pools' (ReqPktRx, ReqBufRx, NetReqPktRx,
/// NetReqBufRx), in [`Credit::ALL`] order.
pub(crate) const TX_LANES: [u32; 8] = [!0, !0, 0, 0, !0, !0, 0, 0];
pub(crate) const RX_LANES: [u32; 8] = [0, 0, !0, !0, 0, 0, !0, !0];
/// Lane mask of every credit (the Tx and Rx parts together).
pub(crate) const ALL_LANES: [u32; 8] = [!0; 8];
/// Lane mask of the ULP regions' credits ([`ULP_CREDITS`]).
const ULP_LANES: [u32; 8] = [!0, !0, !0, !0, !0, !0, 0, 0];

impl Demand {
    /// Nothing.
    pub const ZERO: Demand = Demand { units: [0; 8] };

    /// Buffer cells of `len` bytes: ceil(len / cell) (§8.2.3).
    pub const fn cells(len: usize, cell_size: u16) -> u32 {
        let cell = if cell_size == 0 {
            1
        } else {
            cell_size as usize
        };
        // Twice per transaction: a shift for the usual power-of-two cell
        // instead of a 64-bit division.
        if cell.is_power_of_two() {
            let shift = cell.trailing_zeros();
            return ((len >> shift) + (len & (cell - 1) != 0) as usize) as u32;
        }
        len.div_ceil(cell) as u32
    }

    /// Push Data at the initiator (§8.2.3 table, row Push Data): ReqPktTx 1,
    /// ReqBufTx ceil(L/N), ReqPktRx 1 (the completion), ReqBufRx 0.
    pub const fn push(len: usize, cell_size: u16) -> Demand {
        // One array value (ReqPktTx, ReqBufTx, ReqPktRx; `Credit::ALL`
        // order), so it can be built in a register rather than lane by lane
        // in memory (the reservation's vector loads stalled on those stores).
        Self::push_cells(Self::cells(len, cell_size))
    }

    /// [`push`](Self::push) of a payload of `cells` cells.
    pub const fn push_cells(cells: u32) -> Demand {
        Demand {
            units: [1, cells, 1, 0, 0, 0, 0, 0],
        }
    }

    /// Pull Request at the initiator (row Pull Request): ReqPktTx 1,
    /// ReqBufTx 1 (the request; more if its ULP header exceeds a cell),
    /// ReqPktRx 1 and ReqBufRx ceil(L/N) for the Pull Data, reserved now
    /// (§8.2.2: "the pull request packet proactively allocates all the
    /// resources required by the subsequent pull data phase").
    pub const fn pull_request(header_len: usize, request_length: usize, cell_size: u16) -> Demand {
        let mut d = Demand::ZERO;
        let header_cells = Self::cells(header_len, cell_size);
        d.units[Credit::ReqPktTx.index()] = 1;
        d.units[Credit::ReqBufTx.index()] = if header_cells == 0 { 1 } else { header_cells };
        d.units[Credit::ReqPktRx.index()] = 1;
        d.units[Credit::ReqBufRx.index()] = Self::cells(request_length, cell_size);
        d
    }

    /// Pull Data at the target (row Pull Response): DataPktTx 1, DataBufTx
    /// ceil(L/N).
    pub const fn pull_data(len: usize, cell_size: u16) -> Demand {
        let mut d = Demand::ZERO;
        d.units[Credit::DataPktTx.index()] = 1;
        d.units[Credit::DataBufTx.index()] = Self::cells(len, cell_size);
        d
    }

    /// A received Push Data at the target (§8.2.4 table): NetReqPktRx 1,
    /// NetReqBufRx ceil(L/N).
    pub const fn network_push(len: usize, cell_size: u16) -> Demand {
        // NetReqPktRx, NetReqBufRx (see `push`).
        Demand {
            units: [0, 0, 0, 0, 0, 0, 1, Self::cells(len, cell_size)],
        }
    }

    /// A received Pull Request at the target (§8.2.4 table): NetReqPktRx 1,
    /// NetReqBufRx 1.
    pub const fn network_pull_request() -> Demand {
        let mut d = Demand::ZERO;
        d.units[Credit::NetReqPktRx.index()] = 1;
        d.units[Credit::NetReqBufRx.index()] = 1;
        d
    }

    /// Units of `credit`.
    pub const fn get(&self, credit: Credit) -> u32 {
        self.units[credit.index()]
    }

    /// The Tx-pool part (released when the packet leaves the retransmit
    /// buffer).
    #[cfg(any(test, feature = "testing"))]
    pub const fn tx_part(&self) -> Demand {
        self.masked(TX_LANES)
    }

    /// The Rx-pool part (released when the transaction completes to the
    /// ULP, or its request is acknowledged by the ULP).
    #[cfg(any(test, feature = "testing"))]
    pub const fn rx_part(&self) -> Demand {
        self.masked(RX_LANES)
    }

    /// Holds nothing.
    pub const fn is_zero(&self) -> bool {
        let mut i = 0;
        while i < 8 {
            if self.units[i] != 0 {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Adds the lanes of `demand` that `lanes` selects (all ones or zero per
    /// lane, e.g. [`TX_LANES`]): a caller completing a run of transactions
    /// sums what they free and releases it once
    /// ([`Ctx::release`](crate::transaction::Ctx::release)). Wrapping, as
    /// the release that subtracts the sum.
    #[inline]
    pub(crate) fn add_lanes(&mut self, demand: &Demand, lanes: [u32; 8]) {
        for ((owed, units), lane) in self.units.iter_mut().zip(&demand.units).zip(lanes) {
            *owed = owed.wrapping_add(units & lane);
        }
    }

    /// The lanes of `mask` (all ones or zero per lane).
    const fn masked(&self, mask: [u32; 8]) -> Demand {
        let mut d = *self;
        let mut i = 0;
        while i < 8 {
            d.units[i] &= mask[i];
            i += 1;
        }
        d
    }
}

/// Limits of the eight credit counters of one entity (connection, function
/// or host), in packets or cells. `u32::MAX` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditLimits {
    /// Request Tx packets.
    pub req_pkt_tx: u32,
    /// Request Tx buffer cells.
    pub req_buf_tx: u32,
    /// Request Rx packets.
    pub req_pkt_rx: u32,
    /// Request Rx buffer cells.
    pub req_buf_rx: u32,
    /// Data Tx packets.
    pub data_pkt_tx: u32,
    /// Data Tx buffer cells.
    pub data_buf_tx: u32,
    /// Network request Rx packets.
    pub net_req_pkt_rx: u32,
    /// Network request Rx buffer cells.
    pub net_req_buf_rx: u32,
}

impl CreditLimits {
    /// No limit on anything.
    pub const UNLIMITED: CreditLimits = CreditLimits::all(u32::MAX);

    /// Every counter limited to `n`.
    pub const fn all(n: u32) -> CreditLimits {
        CreditLimits {
            req_pkt_tx: n,
            req_buf_tx: n,
            req_pkt_rx: n,
            req_buf_rx: n,
            data_pkt_tx: n,
            data_buf_tx: n,
            net_req_pkt_rx: n,
            net_req_buf_rx: n,
        }
    }

    /// Packets `packets` and cells `cells` for every region.
    pub const fn uniform(packets: u32, cells: u32) -> CreditLimits {
        CreditLimits {
            req_pkt_tx: packets,
            req_buf_tx: cells,
            req_pkt_rx: packets,
            req_buf_rx: cells,
            data_pkt_tx: packets,
            data_buf_tx: cells,
            net_req_pkt_rx: packets,
            net_req_buf_rx: cells,
        }
    }

    /// The eight limits in [`Credit::ALL`] order.
    pub const fn to_array(&self) -> [u32; 8] {
        [
            self.req_pkt_tx,
            self.req_buf_tx,
            self.req_pkt_rx,
            self.req_buf_rx,
            self.data_pkt_tx,
            self.data_buf_tx,
            self.net_req_pkt_rx,
            self.net_req_buf_rx,
        ]
    }

    /// The limits from eight values in [`Credit::ALL`] order (the inverse
    /// of [`to_array`](Self::to_array)).
    pub const fn from_array(a: [u32; 8]) -> CreditLimits {
        CreditLimits {
            req_pkt_tx: a[0],
            req_buf_tx: a[1],
            req_pkt_rx: a[2],
            req_buf_rx: a[3],
            data_pkt_tx: a[4],
            data_buf_tx: a[5],
            net_req_pkt_rx: a[6],
            net_req_buf_rx: a[7],
        }
    }

    /// The limit of `credit`.
    pub const fn get(&self, credit: Credit) -> u32 {
        match credit {
            Credit::ReqPktTx => self.req_pkt_tx,
            Credit::ReqBufTx => self.req_buf_tx,
            Credit::ReqPktRx => self.req_pkt_rx,
            Credit::ReqBufRx => self.req_buf_rx,
            Credit::DataPktTx => self.data_pkt_tx,
            Credit::DataBufTx => self.data_buf_tx,
            Credit::NetReqPktRx => self.net_req_pkt_rx,
            Credit::NetReqBufRx => self.net_req_buf_rx,
        }
    }
}

/// The credit counters of one entity: limits and units in use. The limits
/// are held once, as an array in [`Credit::ALL`] order for the lane-wise
/// checks (64 bytes; every connection has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditCounter {
    limit: [u32; 8],
    used: [u32; 8],
}

impl CreditCounter {
    /// Nothing used.
    pub const fn new(limits: CreditLimits) -> Self {
        CreditCounter {
            limit: limits.to_array(),
            used: [0; 8],
        }
    }

    /// Units of `credit` in use.
    pub const fn used(&self, credit: Credit) -> u32 {
        self.used[credit.index()]
    }

    /// Units of `credit` still available.
    pub const fn available(&self, credit: Credit) -> u32 {
        self.limit[credit.index()].saturating_sub(self.used(credit))
    }

    /// The limits.
    pub const fn limits(&self) -> CreditLimits {
        CreditLimits::from_array(self.limit)
    }

    /// The first credit of `credits` (a [`CreditSet`]) over its limit with
    /// `demand` added, in index order.
    #[inline]
    fn fits(&self, demand: &Demand, credits: CreditSet) -> Option<Credit> {
        credits.first_over(&self.used, &demand.units, &self.limit, false)
    }
}

/// A connection's dynamic-threshold factor, in 1/256 units: it may hold at
/// most `alpha` × the free space of a network-request region (non-HoL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Alpha(pub u16);

impl Alpha {
    /// α = 1: one backlogged connection alone holds at most half a region.
    pub const ONE: Alpha = Alpha(256);

    /// α from a float (clamped to [1/256, 255]).
    pub fn from_f64(alpha: f64) -> Alpha {
        Alpha((alpha * 256.0).round().clamp(1.0, f64::from(u16::MAX)) as u16)
    }

    /// α as a float.
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 256.0
    }
}

/// Capacity of the two regions of a Tx pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPool {
    /// ULP request region.
    pub ulp_request: u32,
    /// ULP data region (Pull Data).
    pub ulp_data: u32,
}

/// Capacity of the two regions of an Rx pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxPool {
    /// ULP request region.
    pub ulp_request: u32,
    /// Network request region.
    pub network_request: u32,
}

/// The node's resource configuration (the CM sets it up, §8.2.3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceConfig {
    /// Buffer cell size N, in bytes. Default 256.
    pub cell_size: u16,
    /// Tx packet pool, in packets. Default 8192 + 8192.
    pub tx_packet: TxPool,
    /// Tx buffer pool, in cells. Default 131072 + 131072 (32 MiB each).
    pub tx_buffer: TxPool,
    /// Rx packet pool, in packets. Default 8192 + 8192.
    pub rx_packet: RxPool,
    /// Rx buffer pool, in cells. Default 131072 + 131072.
    pub rx_buffer: RxPool,
    /// Per-connection limits (may be overridden per connection). Default
    /// 1024 packets and 16384 cells (4 MiB) per region.
    pub per_connection: CreditLimits,
    /// Per-function limits. Default unlimited.
    pub per_function: CreditLimits,
    /// Per-host limits. Default unlimited.
    pub per_host: CreditLimits,
    /// The green zone of the network-request regions, in percent of their
    /// capacity; above it only HoL requests are accepted (§8.2.4). Default
    /// 75.
    pub green_zone_percent: u8,
    /// Default dynamic-threshold factor of a connection. Default 2 (a lone
    /// backlogged connection holds at most 2/3 of a region).
    pub isolation_alpha: Alpha,
}

impl Default for ResourceConfig {
    fn default() -> Self {
        ResourceConfig {
            cell_size: 256,
            tx_packet: TxPool {
                ulp_request: 8192,
                ulp_data: 8192,
            },
            tx_buffer: TxPool {
                ulp_request: 131_072,
                ulp_data: 131_072,
            },
            rx_packet: RxPool {
                ulp_request: 8192,
                network_request: 8192,
            },
            rx_buffer: RxPool {
                ulp_request: 131_072,
                network_request: 131_072,
            },
            per_connection: CreditLimits::uniform(1024, 16_384),
            per_function: CreditLimits::UNLIMITED,
            per_host: CreditLimits::UNLIMITED,
            green_zone_percent: 75,
            isolation_alpha: Alpha(512),
        }
    }
}

impl ResourceConfig {
    /// A tiny configuration (for deadlock tests): `packets` packets and
    /// `cells` cells per region, the same per connection.
    pub fn tiny(packets: u32, cells: u32) -> Self {
        ResourceConfig {
            tx_packet: TxPool {
                ulp_request: packets,
                ulp_data: packets,
            },
            tx_buffer: TxPool {
                ulp_request: cells,
                ulp_data: cells,
            },
            rx_packet: RxPool {
                ulp_request: packets,
                network_request: packets,
            },
            rx_buffer: RxPool {
                ulp_request: cells,
                network_request: cells,
            },
            per_connection: CreditLimits::uniform(packets, cells),
            ..ResourceConfig::default()
        }
    }

    /// Checks the fields; the error names the first bad one.
    ///
    /// # Errors
    ///
    /// The field name and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.cell_size == 0 {
            return Err(("resources.cell_size", "must be at least 1 byte"));
        }
        if self.green_zone_percent == 0 || self.green_zone_percent > 100 {
            return Err(("resources.green_zone_percent", "must be in 1..=100"));
        }
        if self.isolation_alpha.0 == 0 {
            return Err(("resources.isolation_alpha", "must be positive"));
        }
        for credit in Credit::ALL {
            if self.capacity(credit) == 0 {
                return Err((
                    "resources",
                    "every pool region needs a capacity of at least 1",
                ));
            }
        }
        Ok(())
    }

    /// The global capacity of `credit`'s region.
    pub const fn capacity(&self, credit: Credit) -> u32 {
        match credit {
            Credit::ReqPktTx => self.tx_packet.ulp_request,
            Credit::ReqBufTx => self.tx_buffer.ulp_request,
            Credit::ReqPktRx => self.rx_packet.ulp_request,
            Credit::ReqBufRx => self.rx_buffer.ulp_request,
            Credit::DataPktTx => self.tx_packet.ulp_data,
            Credit::DataBufTx => self.tx_buffer.ulp_data,
            Credit::NetReqPktRx => self.rx_packet.network_request,
            Credit::NetReqBufRx => self.rx_buffer.network_request,
        }
    }
}

/// Which level refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The connection's credits.
    Connection,
    /// The connection's dynamic threshold (network requests).
    DynamicThreshold,
    /// The function's credits.
    Function,
    /// The region's global capacity.
    Global,
    /// The host's credits.
    Host,
    /// The network-request region is in its red zone and the request is
    /// not head-of-line (§8.2.4).
    RedZone,
}

/// A reservation refused: which credit, at which level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortage {
    /// The credit that ran out.
    pub credit: Credit,
    /// Where.
    pub level: Level,
}

impl fmt::Display for Shortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "out of {} ({:?})", self.credit.name(), self.level)
    }
}

/// The entity a reservation is charged to: a connection's counter, its
/// function and host indices, and its dynamic-threshold factor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// The connection's counters.
    pub credits: CreditCounter,
    /// Index of the connection's function.
    pub function: u16,
    /// Index of the connection's host.
    pub host: u16,
    /// The connection's dynamic-threshold factor.
    pub alpha: Alpha,
    /// Per [`CreditClass`], the ULP was told Xoff for it and awaits its Xon
    /// (flow control, §8.2.3).
    pub xoff: [bool; 2],
}

/// Node-wide resource accounting.
#[derive(Debug, Clone)]
pub struct Resources {
    config: ResourceConfig,
    /// Region capacities in [`Credit::ALL`] order.
    capacity: [u32; 8],
    /// The green zone of each region (`capacity × green_zone_percent /
    /// 100`; only the network-request ones are used).
    green: [u32; 8],
    used: [u32; 8],
    /// [`ULP_LANES`], read from here by `reserve_ulp`'s one-pass check: as a
    /// constant, LLVM folds the two masked-out lanes away, checks the other six
    /// as four plus two and packs the halves' results back together.
    ulp_lanes: [u32; 8],
    /// log2 of the cell size when it is a power of two (the usual case),
    /// else `u32::MAX`; with `cell_mask` (cell size − 1), for
    /// [`cells`](Self::cells).
    cell_shift: u32,
    cell_mask: usize,
    /// Per-function counters; empty when functions are unlimited (nothing
    /// to enforce, so nothing to count on the hot path).
    functions: Vec<CreditCounter>,
    /// Per-host counters; empty when hosts are unlimited.
    hosts: Vec<CreditCounter>,
}

impl Resources {
    /// Empty pools.
    pub fn new(config: ResourceConfig) -> Self {
        let capacity = Credit::ALL.map(|c| config.capacity(c));
        let green = capacity.map(|c| {
            // Invariant: ≤ capacity, a u32.
            (u64::from(c) * u64::from(config.green_zone_percent) / 100) as u32
        });
        // As `Demand::cells` takes it: a cell size of 0 counts as 1.
        let cell = usize::from(config.cell_size.max(1));
        let cell_shift = if cell.is_power_of_two() {
            cell.trailing_zeros()
        } else {
            u32::MAX
        };
        Resources {
            config,
            capacity,
            green,
            used: [0; 8],
            ulp_lanes: ULP_LANES,
            cell_shift,
            cell_mask: cell - 1,
            functions: Vec::new(),
            hosts: Vec::new(),
        }
    }

    /// An account for a new connection with the default limits and alpha
    /// (or `limits`), charging `function` and `host`.
    pub fn open_account(
        &mut self,
        limits: Option<CreditLimits>,
        function: u16,
        host: u16,
    ) -> Account {
        let grow = |v: &mut Vec<CreditCounter>, i: u16, l: CreditLimits| {
            while v.len() <= usize::from(i) {
                v.push(CreditCounter::new(l));
            }
        };
        if self.config.per_function != CreditLimits::UNLIMITED {
            grow(&mut self.functions, function, self.config.per_function);
        }
        if self.config.per_host != CreditLimits::UNLIMITED {
            grow(&mut self.hosts, host, self.config.per_host);
        }
        Account {
            credits: CreditCounter::new(limits.unwrap_or(self.config.per_connection)),
            function,
            host,
            alpha: self.config.isolation_alpha,
            xoff: [false; 2],
        }
    }

    /// Reserves a ULP demand (a submitted transaction or Pull Data): every
    /// level must have room (§8.2.3).
    ///
    /// # Errors
    ///
    /// The first [`Shortage`]; nothing is reserved then.
    #[inline]
    pub fn reserve_ulp(&mut self, account: &mut Account, demand: &Demand) -> Result<(), Shortage> {
        if self.functions.is_empty() && self.hosts.is_empty() {
            // Connection and global levels only (functions and hosts unlimited,
            // the default): one branch-free pass over the six lanes decides,
            // and only a refusal takes the checks below to name its shortage.
            // The sums `commit` would store, computed once: checked here,
            // stored if they pass (not added again in `commit`).
            let mut connection = account.credits.used;
            let mut global = self.used;
            add_lanes(&mut connection, demand);
            add_lanes(&mut global, demand);
            let mut over = false;
            for i in 0..8 {
                // Over all eight u32 lanes, the two network ones masked out at
                // the end, branch-free; a sum below its addend wrapped, which
                // the u64 checks below count as over any limit.
                // Non-short-circuit `&`/`|` so the lanes vectorize.
                let units = demand.units[i];
                let (connection, global) = (connection[i], global[i]);
                let connection_over =
                    (connection < units) | (connection > account.credits.limit[i]);
                let global_over = (units != 0) & ((global < units) | (global > self.capacity[i]));
                over |= (connection_over | global_over) & (self.ulp_lanes[i] != 0);
            }
            if !over {
                // `commit`, which has no function or host level to add to
                // here.
                account.credits.used = connection;
                self.used = global;
                return Ok(());
            }
        }
        self.check_entities(account, demand, ULP_CREDITS)?;
        self.check_global(demand, ULP_CREDITS, Level::Global, &self.capacity)?;
        self.commit(account, demand);
        Ok(())
    }

    /// Reserves a received request's network demand (§8.2.4). A HoL
    /// request is checked against the regions' hard capacity only; any
    /// other must fit the green zone, the entity limits and the
    /// connection's dynamic threshold.
    ///
    /// # Errors
    ///
    /// The first [`Shortage`]; nothing is reserved then.
    #[inline(always)]
    pub fn reserve_network(
        &mut self,
        account: &mut Account,
        demand: &Demand,
        head_of_line: bool,
    ) -> Result<(), Shortage> {
        if head_of_line {
            self.check_global(demand, NET_CREDITS, Level::Global, &self.capacity)?;
        } else {
            self.check_global(demand, NET_CREDITS, Level::RedZone, &self.green)?;
            self.check_entities(account, demand, NET_CREDITS)?;
            for credit in [Credit::NetReqPktRx, Credit::NetReqBufRx] {
                // used + d ≤ α·(capacity − region used), in 1/256 units.
                let free = u64::from(self.config.capacity(credit))
                    .saturating_sub(u64::from(self.used[credit.index()]));
                let held = u64::from(account.credits.used(credit)) + u64::from(demand.get(credit));
                if held * 256 > u64::from(account.alpha.0) * free {
                    return Err(Shortage {
                        credit,
                        level: Level::DynamicThreshold,
                    });
                }
            }
        }
        self.commit(account, demand);
        Ok(())
    }

    /// Returns a demand's units to every level.
    pub fn release(&mut self, account: &mut Account, demand: &Demand) {
        sub_lanes(&mut account.credits.used, demand);
        if let Some(f) = self.functions.get_mut(usize::from(account.function)) {
            sub_lanes(&mut f.used, demand);
        }
        if let Some(h) = self.hosts.get_mut(usize::from(account.host)) {
            sub_lanes(&mut h.used, demand);
        }
        sub_lanes(&mut self.used, demand);
    }

    /// Releases the lanes of `demand` that `lanes` selects (all ones or zero
    /// per lane, e.g. [`TX_LANES`]); returns whether any unit was released.
    /// The same as releasing `demand.tx_part()`, without first storing the
    /// part: the vector loads of the subtraction stalled on store
    /// forwarding from a part written lane by lane just before (perf
    /// annotate: ~65 % of `release`'s samples on those loads).
    #[inline]
    pub(crate) fn release_lanes(
        &mut self,
        account: &mut Account,
        demand: &Demand,
        lanes: [u32; 8],
    ) -> bool {
        let part = demand.masked(lanes);
        if part.is_zero() {
            return false;
        }
        sub_lanes(&mut account.credits.used, &part);
        if let Some(f) = self.functions.get_mut(usize::from(account.function)) {
            sub_lanes(&mut f.used, &part);
        }
        if let Some(h) = self.hosts.get_mut(usize::from(account.host)) {
            sub_lanes(&mut h.used, &part);
        }
        sub_lanes(&mut self.used, &part);
        true
    }

    /// Whether `demand` would pass [`reserve_ulp`](Self::reserve_ulp) now.
    pub fn ulp_fits(&self, account: &Account, demand: &Demand) -> bool {
        self.check_entities(account, demand, ULP_CREDITS).is_ok()
            && self
                .check_global(demand, ULP_CREDITS, Level::Global, &self.capacity)
                .is_ok()
    }

    /// Units of `credit`'s region in use node-wide.
    pub const fn used(&self, credit: Credit) -> u32 {
        self.used[credit.index()]
    }

    /// The configuration.
    pub const fn config(&self) -> &ResourceConfig {
        &self.config
    }

    /// [`Demand::cells`] of `len` bytes in this pool's cells, the cell size's
    /// shift and mask worked out once, not per call.
    #[inline]
    pub fn cells(&self, len: usize) -> u32 {
        if self.cell_shift == u32::MAX {
            return Demand::cells(len, self.config.cell_size);
        }
        ((len >> self.cell_shift) + usize::from(len & self.cell_mask != 0)) as u32
    }

    fn check_entities(
        &self,
        account: &Account,
        demand: &Demand,
        credits: CreditSet,
    ) -> Result<(), Shortage> {
        let short = |credit, level| Err(Shortage { credit, level });
        if let Some(credit) = account.credits.fits(demand, credits) {
            return short(credit, Level::Connection);
        }
        if let Some(credit) = self
            .functions
            .get(usize::from(account.function))
            .and_then(|f| f.fits(demand, credits))
        {
            return short(credit, Level::Function);
        }
        if let Some(credit) = self
            .hosts
            .get(usize::from(account.host))
            .and_then(|h| h.fits(demand, credits))
        {
            return short(credit, Level::Host);
        }
        Ok(())
    }

    /// Every credit of `credits` with units in `demand` must stay within
    /// `limit` (the capacities, or the green zone); the first that does not,
    /// in index order, is the shortage.
    #[inline]
    fn check_global(
        &self,
        demand: &Demand,
        credits: CreditSet,
        level: Level,
        limit: &[u32; 8],
    ) -> Result<(), Shortage> {
        match credits.first_over(&self.used, &demand.units, limit, true) {
            Some(credit) => Err(Shortage { credit, level }),
            None => Ok(()),
        }
    }

    #[inline]
    fn commit(&mut self, account: &mut Account, demand: &Demand) {
        add_lanes(&mut account.credits.used, demand);
        if let Some(f) = self.functions.get_mut(usize::from(account.function)) {
            add_lanes(&mut f.used, demand);
        }
        if let Some(h) = self.hosts.get_mut(usize::from(account.host)) {
            add_lanes(&mut h.used, demand);
        }
        add_lanes(&mut self.used, demand);
    }
}

// Plain (wrapping) arithmetic so the eight lanes vectorize: a reservation
// passed the global check, so `used + units` fits a u32 capacity, and a
// release returns what was reserved.
fn add_lanes(used: &mut [u32; 8], demand: &Demand) {
    for (used, units) in used.iter_mut().zip(&demand.units) {
        *used = used.wrapping_add(*units);
    }
}

fn sub_lanes(used: &mut [u32; 8], demand: &Demand) {
    for (used, units) in used.iter_mut().zip(&demand.units) {
        debug_assert!(*used >= *units, "released more than was reserved");
        *used = used.wrapping_sub(*units);
    }
}

/// A run of credits by index (both sets the checks use are contiguous in
/// [`Credit::ALL`]). Every check reports the first failing credit of its set
/// in index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CreditSet {
    start: usize,
    end: usize,
}

impl CreditSet {
    /// The first credit of the set whose `used + units` (no wrapping) exceeds
    /// `limit`; with `only_demanded`, among those with units. Indexing arrays
    /// directly, not through `Credit` and per-field `match`es, keeps
    /// `reserve_ulp` short.
    #[inline]
    fn first_over(
        self,
        used: &[u32; 8],
        units: &[u32; 8],
        limit: &[u32; 8],
        only_demanded: bool,
    ) -> Option<Credit> {
        (self.start..self.end.min(8))
            .find(|&i| {
                (!only_demanded || units[i] != 0)
                    && u64::from(used[i]) + u64::from(units[i]) > u64::from(limit[i])
            })
            .map(|i| Credit::ALL[i])
    }
}

/// The credits of the ULP regions (ReqPktTx … DataBufTx).
const ULP_CREDITS: CreditSet = CreditSet { start: 0, end: 6 };
/// The credits of the network-request regions.
const NET_CREDITS: CreditSet = CreditSet { start: 6, end: 8 };

#[cfg(test)]
mod tests;
