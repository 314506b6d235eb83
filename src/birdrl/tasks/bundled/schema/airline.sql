-- airline: a European network carrier (synthetic, seeded; airport facts approximate).
-- Snapshot date 2024-06-30: flights after it are 'scheduled'. All flight and booking times
-- are TEXT 'YYYY-MM-DD HH:MM:SS' in UTC; airports.utc_offset_min gives local time (no DST).
-- Fares and totals are REAL, in the booking's currency.

CREATE TABLE airports (
    airport_code TEXT PRIMARY KEY CHECK (length(airport_code) = 3),
    name TEXT NOT NULL,
    city TEXT NOT NULL,
    country TEXT NOT NULL,
    latitude REAL NOT NULL,
    longitude REAL NOT NULL,
    utc_offset_min INTEGER NOT NULL
);

CREATE TABLE aircraft (
    aircraft_id INTEGER PRIMARY KEY,
    tail_number TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    seats_business INTEGER NOT NULL CHECK (seats_business >= 0),
    seats_economy INTEGER NOT NULL CHECK (seats_economy > 0),
    year_built INTEGER NOT NULL,
    retired_on TEXT
);

CREATE TABLE routes (
    route_id INTEGER PRIMARY KEY,
    origin_code TEXT NOT NULL REFERENCES airports (airport_code),
    destination_code TEXT NOT NULL REFERENCES airports (airport_code),
    distance_km INTEGER NOT NULL CHECK (distance_km > 0),
    CHECK (origin_code <> destination_code),
    UNIQUE (origin_code, destination_code)
);

CREATE TABLE flights (
    flight_id INTEGER PRIMARY KEY,
    flight_number TEXT NOT NULL,
    route_id INTEGER NOT NULL REFERENCES routes (route_id),
    aircraft_id INTEGER REFERENCES aircraft (aircraft_id),  -- NULL: not yet assigned
    scheduled_departure TEXT NOT NULL,
    scheduled_arrival TEXT NOT NULL,
    actual_departure TEXT,
    actual_arrival TEXT,
    status TEXT NOT NULL CHECK (status IN ('scheduled', 'arrived', 'cancelled', 'diverted')),
    UNIQUE (flight_number, scheduled_departure),
    CHECK (scheduled_arrival > scheduled_departure)
);

CREATE TABLE passengers (
    passenger_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    birth_date TEXT,
    nationality TEXT,  -- ISO 3166 alpha-2, as typed
    passport_number TEXT UNIQUE,
    email TEXT,
    loyalty_tier TEXT CHECK (loyalty_tier IN ('silver', 'gold', 'platinum'))
);

CREATE TABLE bookings (
    booking_id INTEGER PRIMARY KEY,
    booking_ref TEXT NOT NULL UNIQUE,
    booked_at TEXT NOT NULL,
    channel TEXT NOT NULL CHECK (channel IN ('web', 'app', 'agent', 'phone')),
    contact_email TEXT,
    currency TEXT NOT NULL DEFAULT 'EUR',
    total_amount REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('confirmed', 'cancelled', 'refunded'))
);

-- One passenger on one flight of one booking (passengers and flights, many-to-many).
CREATE TABLE tickets (
    ticket_id INTEGER PRIMARY KEY,
    booking_id INTEGER NOT NULL REFERENCES bookings (booking_id),
    passenger_id INTEGER NOT NULL REFERENCES passengers (passenger_id),
    flight_id INTEGER NOT NULL REFERENCES flights (flight_id),
    fare_class TEXT NOT NULL CHECK (fare_class IN ('economy', 'premium', 'business')),
    fare REAL NOT NULL CHECK (fare >= 0),
    seat TEXT,  -- assigned at check-in; NULL before
    checked_in INTEGER NOT NULL DEFAULT 0 CHECK (checked_in IN (0, 1)),
    baggage_kg REAL,
    UNIQUE (flight_id, passenger_id),
    UNIQUE (flight_id, seat)
);

CREATE INDEX idx_routes_destination ON routes (destination_code);
CREATE INDEX idx_flights_route_departure ON flights (route_id, scheduled_departure);
CREATE INDEX idx_flights_departure ON flights (scheduled_departure);
CREATE INDEX idx_passengers_name ON passengers (last_name, first_name);
CREATE INDEX idx_tickets_booking ON tickets (booking_id);
CREATE INDEX idx_tickets_passenger ON tickets (passenger_id);

-- Seats sold per flight against the aircraft's capacity (cancelled bookings excluded).
CREATE VIEW v_flight_load AS
SELECT f.flight_id, f.flight_number, f.scheduled_departure, r.origin_code, r.destination_code,
       a.seats_business + a.seats_economy AS capacity,
       COUNT(t.ticket_id) AS tickets_sold
FROM flights AS f
JOIN routes AS r ON r.route_id = f.route_id
LEFT JOIN aircraft AS a ON a.aircraft_id = f.aircraft_id
LEFT JOIN tickets AS t ON t.flight_id = f.flight_id
    AND t.booking_id IN (SELECT booking_id FROM bookings WHERE status = 'confirmed')
GROUP BY f.flight_id;
