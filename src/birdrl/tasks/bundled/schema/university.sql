-- university: a small university's registrar (synthetic, seeded). Snapshot date 2024-06-30:
-- Fall 2024 enrollments exist but have no grade yet. Dates are TEXT 'YYYY-MM-DD';
-- enrolled_at is 'YYYY-MM-DD HH:MM:SS'. Salaries and budgets are REAL.

CREATE TABLE departments (
    dept_id INTEGER PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    building TEXT,
    budget REAL CHECK (budget >= 0)
);

CREATE TABLE instructors (
    instructor_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    email TEXT UNIQUE,
    dept_id INTEGER NOT NULL REFERENCES departments (dept_id),
    rank TEXT NOT NULL CHECK (rank IN ('lecturer', 'assistant', 'associate', 'full')),
    salary REAL NOT NULL CHECK (salary > 0),
    hired_on TEXT NOT NULL
);

CREATE TABLE courses (
    course_id INTEGER PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,  -- e.g. 'CS 201'
    title TEXT NOT NULL,
    dept_id INTEGER NOT NULL REFERENCES departments (dept_id),
    credits INTEGER NOT NULL CHECK (credits BETWEEN 1 AND 6),
    level INTEGER NOT NULL CHECK (level IN (100, 200, 300, 400))
);

CREATE TABLE course_prerequisites (
    course_id INTEGER NOT NULL REFERENCES courses (course_id),
    prereq_course_id INTEGER NOT NULL REFERENCES courses (course_id),
    min_grade TEXT,  -- NULL: any passing grade
    PRIMARY KEY (course_id, prereq_course_id),
    CHECK (course_id <> prereq_course_id)
);

CREATE TABLE terms (
    term_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,  -- 'Fall 2019', 'Spring 2020', ...
    starts_on TEXT NOT NULL,
    ends_on TEXT NOT NULL,
    CHECK (ends_on > starts_on)
);

CREATE TABLE sections (
    section_id INTEGER PRIMARY KEY,
    course_id INTEGER NOT NULL REFERENCES courses (course_id),
    term_id INTEGER NOT NULL REFERENCES terms (term_id),
    section_no INTEGER NOT NULL,
    instructor_id INTEGER REFERENCES instructors (instructor_id),  -- NULL: to be announced
    room TEXT,
    capacity INTEGER NOT NULL CHECK (capacity > 0),
    UNIQUE (course_id, term_id, section_no)
);

CREATE TABLE students (
    student_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    email TEXT,
    birth_date TEXT,
    admitted_on TEXT NOT NULL,
    major_dept_id INTEGER REFERENCES departments (dept_id),  -- NULL: undeclared
    advisor_id INTEGER REFERENCES instructors (instructor_id),
    status TEXT NOT NULL CHECK (status IN ('active', 'graduated', 'withdrawn', 'on_leave'))
);

-- Letter grades and their grade points; W (withdrawn) and I (incomplete) carry none.
CREATE TABLE grade_points (
    grade TEXT PRIMARY KEY,
    points REAL
);

-- Students and sections, many-to-many. grade NULL: not graded yet.
CREATE TABLE enrollments (
    student_id INTEGER NOT NULL REFERENCES students (student_id),
    section_id INTEGER NOT NULL REFERENCES sections (section_id),
    enrolled_at TEXT NOT NULL,
    grade TEXT REFERENCES grade_points (grade),
    PRIMARY KEY (student_id, section_id)
);

CREATE INDEX idx_instructors_dept ON instructors (dept_id);
CREATE INDEX idx_courses_dept ON courses (dept_id);
CREATE INDEX idx_sections_term ON sections (term_id);
CREATE INDEX idx_sections_instructor ON sections (instructor_id);
CREATE INDEX idx_students_major ON students (major_dept_id);
CREATE INDEX idx_enrollments_section ON enrollments (section_id);

-- Credit-weighted GPA per student over graded enrollments that carry grade points.
CREATE VIEW v_student_gpa AS
SELECT e.student_id,
       SUM(c.credits) AS graded_credits,
       ROUND(SUM(gp.points * c.credits) / SUM(c.credits), 2) AS gpa
FROM enrollments AS e
JOIN sections AS s ON s.section_id = e.section_id
JOIN courses AS c ON c.course_id = s.course_id
JOIN grade_points AS gp ON gp.grade = e.grade
WHERE gp.points IS NOT NULL
GROUP BY e.student_id;

-- Enrolled students against capacity, per section.
CREATE VIEW v_section_fill AS
SELECT s.section_id, c.code, t.name AS term, s.section_no, s.capacity,
       COUNT(e.student_id) AS enrolled
FROM sections AS s
JOIN courses AS c ON c.course_id = s.course_id
JOIN terms AS t ON t.term_id = s.term_id
LEFT JOIN enrollments AS e ON e.section_id = s.section_id
GROUP BY s.section_id;
