-- library: a public library network (synthetic, seeded). Snapshot date 2024-06-30: loans with
-- returned_at NULL are still out. Dates are TEXT: joined_on/due_on/acquired_on/assessed_on/
-- paid_on 'YYYY-MM-DD'; loaned_at 'YYYY-MM-DD HH:MM:SS'; returned_at is 'YYYY-MM-DD HH:MM:SS'
-- at the desk but only 'YYYY-MM-DD' for book-drop returns. Money is REAL.

CREATE TABLE branches (
    branch_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    city TEXT NOT NULL,
    opened_on TEXT
);

CREATE TABLE publishers (
    publisher_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    country TEXT
);

CREATE TABLE authors (
    author_id INTEGER PRIMARY KEY,
    full_name TEXT NOT NULL,
    birth_year INTEGER,
    death_year INTEGER,
    nationality TEXT,
    CHECK (death_year IS NULL OR birth_year IS NULL OR death_year >= birth_year)
);

CREATE TABLE books (
    book_id INTEGER PRIMARY KEY,
    isbn13 TEXT UNIQUE,
    title TEXT NOT NULL,
    publisher_id INTEGER REFERENCES publishers (publisher_id),
    published_year INTEGER,
    language TEXT NOT NULL,
    pages INTEGER CHECK (pages > 0),
    list_price REAL
);

CREATE TABLE book_authors (
    book_id INTEGER NOT NULL REFERENCES books (book_id),
    author_id INTEGER NOT NULL REFERENCES authors (author_id),
    author_order INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (book_id, author_id)
);

CREATE TABLE subjects (
    subject_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

CREATE TABLE book_subjects (
    book_id INTEGER NOT NULL REFERENCES books (book_id),
    subject_id INTEGER NOT NULL REFERENCES subjects (subject_id),
    PRIMARY KEY (book_id, subject_id)
);

CREATE TABLE copies (
    copy_id INTEGER PRIMARY KEY,
    book_id INTEGER NOT NULL REFERENCES books (book_id),
    branch_id INTEGER NOT NULL REFERENCES branches (branch_id),
    barcode TEXT NOT NULL UNIQUE,
    acquired_on TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('available', 'on_loan', 'lost', 'withdrawn'))
);

CREATE TABLE members (
    member_id INTEGER PRIMARY KEY,
    card_number TEXT NOT NULL UNIQUE,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    email TEXT,
    birth_date TEXT,
    joined_on TEXT NOT NULL,
    membership_type TEXT NOT NULL CHECK (membership_type IN ('adult', 'student', 'senior', 'child')),
    home_branch_id INTEGER NOT NULL REFERENCES branches (branch_id),
    is_active INTEGER NOT NULL DEFAULT 1 CHECK (is_active IN (0, 1))
);

CREATE TABLE loans (
    loan_id INTEGER PRIMARY KEY,
    copy_id INTEGER NOT NULL REFERENCES copies (copy_id),
    member_id INTEGER NOT NULL REFERENCES members (member_id),
    loaned_at TEXT NOT NULL,
    due_on TEXT NOT NULL,
    returned_at TEXT,
    renewals INTEGER NOT NULL DEFAULT 0 CHECK (renewals BETWEEN 0 AND 3)
);

CREATE TABLE fines (
    fine_id INTEGER PRIMARY KEY,
    loan_id INTEGER NOT NULL REFERENCES loans (loan_id),
    reason TEXT NOT NULL CHECK (reason IN ('overdue', 'damaged', 'lost')),
    amount REAL NOT NULL CHECK (amount > 0),
    assessed_on TEXT NOT NULL,
    paid_on TEXT
);

CREATE INDEX idx_book_authors_author ON book_authors (author_id);
CREATE INDEX idx_book_subjects_subject ON book_subjects (subject_id);
CREATE INDEX idx_books_title ON books (title);
CREATE INDEX idx_copies_book ON copies (book_id);
CREATE INDEX idx_loans_copy ON loans (copy_id);
CREATE INDEX idx_loans_member ON loans (member_id);
CREATE INDEX idx_loans_due_open ON loans (due_on) WHERE returned_at IS NULL;
CREATE INDEX idx_fines_loan ON fines (loan_id);

-- Loans not yet returned at the 2024-06-30 snapshot, with days past due on that date.
CREATE VIEW v_open_loans AS
SELECT l.loan_id, l.copy_id, b.book_id, b.title, l.member_id, l.loaned_at, l.due_on,
       CAST(julianday('2024-06-30') - julianday(l.due_on) AS INTEGER) AS days_overdue
FROM loans AS l
JOIN copies AS c ON c.copy_id = l.copy_id
JOIN books AS b ON b.book_id = c.book_id
WHERE l.returned_at IS NULL;

-- One row per book with its authors' names in author order.
CREATE VIEW v_book_authors AS
SELECT b.book_id, b.title,
       (SELECT group_concat(full_name, '; ')
        FROM (SELECT a.full_name FROM book_authors AS ba
              JOIN authors AS a ON a.author_id = ba.author_id
              WHERE ba.book_id = b.book_id ORDER BY ba.author_order)) AS authors
FROM books AS b;
