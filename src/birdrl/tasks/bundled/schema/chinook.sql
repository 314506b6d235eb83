-- chinook: a digital music store (the public Chinook sample database, real data).
-- Table and column names are Chinook's own (PascalCase). Dates are TEXT 'YYYY-MM-DD HH:MM:SS';
-- money is NUMERIC(10,2), stored by SQLite as REAL.

CREATE TABLE Genre (
    GenreId INTEGER NOT NULL PRIMARY KEY,
    Name NVARCHAR(120)
);

CREATE TABLE MediaType (
    MediaTypeId INTEGER NOT NULL PRIMARY KEY,
    Name NVARCHAR(120)
);

CREATE TABLE Artist (
    ArtistId INTEGER NOT NULL PRIMARY KEY,
    Name NVARCHAR(120)
);

CREATE TABLE Album (
    AlbumId INTEGER NOT NULL PRIMARY KEY,
    Title NVARCHAR(160) NOT NULL,
    ArtistId INTEGER NOT NULL REFERENCES Artist (ArtistId)
);

CREATE TABLE Track (
    TrackId INTEGER NOT NULL PRIMARY KEY,
    Name NVARCHAR(200) NOT NULL,
    AlbumId INTEGER REFERENCES Album (AlbumId),
    MediaTypeId INTEGER NOT NULL REFERENCES MediaType (MediaTypeId),
    GenreId INTEGER REFERENCES Genre (GenreId),
    Composer NVARCHAR(220),
    Milliseconds INTEGER NOT NULL,
    Bytes INTEGER,
    UnitPrice NUMERIC(10,2) NOT NULL
);

CREATE TABLE Employee (
    EmployeeId INTEGER NOT NULL PRIMARY KEY,
    LastName NVARCHAR(20) NOT NULL,
    FirstName NVARCHAR(20) NOT NULL,
    Title NVARCHAR(30),
    ReportsTo INTEGER REFERENCES Employee (EmployeeId),
    BirthDate DATETIME,
    HireDate DATETIME,
    Address NVARCHAR(70),
    City NVARCHAR(40),
    State NVARCHAR(40),
    Country NVARCHAR(40),
    PostalCode NVARCHAR(10),
    Phone NVARCHAR(24),
    Fax NVARCHAR(24),
    Email NVARCHAR(60)
);

CREATE TABLE Customer (
    CustomerId INTEGER NOT NULL PRIMARY KEY,
    FirstName NVARCHAR(40) NOT NULL,
    LastName NVARCHAR(20) NOT NULL,
    Company NVARCHAR(80),
    Address NVARCHAR(70),
    City NVARCHAR(40),
    State NVARCHAR(40),
    Country NVARCHAR(40),
    PostalCode NVARCHAR(10),
    Phone NVARCHAR(24),
    Fax NVARCHAR(24),
    Email NVARCHAR(60) NOT NULL,
    SupportRepId INTEGER REFERENCES Employee (EmployeeId)
);

CREATE TABLE Invoice (
    InvoiceId INTEGER NOT NULL PRIMARY KEY,
    CustomerId INTEGER NOT NULL REFERENCES Customer (CustomerId),
    InvoiceDate DATETIME NOT NULL,
    BillingAddress NVARCHAR(70),
    BillingCity NVARCHAR(40),
    BillingState NVARCHAR(40),
    BillingCountry NVARCHAR(40),
    BillingPostalCode NVARCHAR(10),
    Total NUMERIC(10,2) NOT NULL
);

CREATE TABLE InvoiceLine (
    InvoiceLineId INTEGER NOT NULL PRIMARY KEY,
    InvoiceId INTEGER NOT NULL REFERENCES Invoice (InvoiceId),
    TrackId INTEGER NOT NULL REFERENCES Track (TrackId),
    UnitPrice NUMERIC(10,2) NOT NULL,
    Quantity INTEGER NOT NULL
);

CREATE TABLE Playlist (
    PlaylistId INTEGER NOT NULL PRIMARY KEY,
    Name NVARCHAR(120)
);

CREATE TABLE PlaylistTrack (
    PlaylistId INTEGER NOT NULL REFERENCES Playlist (PlaylistId),
    TrackId INTEGER NOT NULL REFERENCES Track (TrackId),
    PRIMARY KEY (PlaylistId, TrackId)
);

CREATE INDEX IFK_AlbumArtistId ON Album (ArtistId);
CREATE INDEX IFK_CustomerSupportRepId ON Customer (SupportRepId);
CREATE INDEX IFK_EmployeeReportsTo ON Employee (ReportsTo);
CREATE INDEX IFK_InvoiceCustomerId ON Invoice (CustomerId);
CREATE INDEX IFK_InvoiceLineInvoiceId ON InvoiceLine (InvoiceId);
CREATE INDEX IFK_InvoiceLineTrackId ON InvoiceLine (TrackId);
CREATE INDEX IFK_PlaylistTrackTrackId ON PlaylistTrack (TrackId);
CREATE INDEX IFK_TrackAlbumId ON Track (AlbumId);
CREATE INDEX IFK_TrackGenreId ON Track (GenreId);
CREATE INDEX IFK_TrackMediaTypeId ON Track (MediaTypeId);

-- One row per track with its album, artist, genre and media type names spelled out.
CREATE VIEW TrackDetail AS
SELECT t.TrackId, t.Name AS TrackName, al.Title AS AlbumTitle, ar.Name AS ArtistName,
       g.Name AS GenreName, m.Name AS MediaTypeName, t.Composer, t.Milliseconds, t.UnitPrice
FROM Track AS t
LEFT JOIN Album AS al ON al.AlbumId = t.AlbumId
LEFT JOIN Artist AS ar ON ar.ArtistId = al.ArtistId
LEFT JOIN Genre AS g ON g.GenreId = t.GenreId
JOIN MediaType AS m ON m.MediaTypeId = t.MediaTypeId;

-- One row per invoice with its customer's name and its number of lines.
CREATE VIEW InvoiceSummary AS
SELECT i.InvoiceId, i.CustomerId, c.FirstName || ' ' || c.LastName AS CustomerName,
       i.InvoiceDate, i.BillingCountry, COUNT(il.InvoiceLineId) AS LineCount, i.Total
FROM Invoice AS i
JOIN Customer AS c ON c.CustomerId = i.CustomerId
LEFT JOIN InvoiceLine AS il ON il.InvoiceId = i.InvoiceId
GROUP BY i.InvoiceId;
